"""The attempt timeline (`show --timeline`, the dashboard's bars) and the training curves'
reading of metrics.jsonl, from a job whose story is pinned by hand."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tpujob.service import curves
from tpujob.service.timeline import timeline


@pytest.fixture
def ended(story):
    """The story, cancelled at T+1190: `show` asks the hosts of a RUNNING job over SSH (which
    would start an emulator for this store); a cancelled one it does not."""
    from tpujob.store.states import State

    ctx, job, T = story
    ctx.store.clock = lambda: T + 1190.0
    with ctx.store.atomic():
        ctx.store.end_attempt(job.id, 2, "cancelled")
        ctx.store.transition(job.id, State.RUNNING, State.CANCELLED, "cancelled by user")
    return story


def _line(story):
    ctx, job, T = story
    return timeline(job, ctx.store.attempts(job.id), ctx.store.events(job.id), T + 1200.0)


def test_each_attempt_is_a_bar_split_by_state_with_the_recovery_on_the_attempt_before_it(story):
    T = story[2]
    line = _line(story)
    assert (line.start, line.end) == (T + 1000.0, T + 1200.0)
    first, second = line.bars
    assert [(s.state, s.start, s.end) for s in first.spans] == [
        ("PROVISIONING", T + 1010.0, T + 1020.0), ("SETTING_UP", T + 1020.0, T + 1080.0),
        ("RUNNING", T + 1080.0, T + 1090.0), ("RECOVERING", T + 1090.0, T + 1130.0)]
    assert (first.end_reason, second.start, second.end) == ("preempted", T + 1130.0, T + 1200.0)
    assert [(s.state, s.start, s.end) for s in second.spans] == [
        ("PROVISIONING", T + 1130.0, T + 1140.0), ("SETTING_UP", T + 1140.0, T + 1150.0),
        ("RUNNING", T + 1150.0, T + 1200.0)]
    assert [(m.kind, m.at, m.attempt) for m in line.marks] == [("preempted", T + 1090.0, 1)]


def test_show_timeline_draws_a_row_per_attempt_with_the_preemption_marked(cli, ended, no_emulator_left):
    result = cli("show", "night", "--timeline")
    assert result.code == 0, result.err
    rows = [line for line in result.out.splitlines() if line.startswith("attempt ")]
    assert len(rows) == 2, result.out
    assert "P" in rows[0] and rows[0].rstrip().endswith("preempted") and "█" in rows[0]
    assert "P" not in rows[1] and "█" in rows[1] and "░" in rows[1]
    # Attempt 2's cells start where attempt 1's row ends: the rows do not overlap.
    assert rows[1].index("░") > rows[0].rindex("~")
    assert "█ RUNNING" in result.out and "P preempted" in result.out


def test_show_json_timeline_has_the_bars(cli, ended, no_emulator_left):
    result = cli("show", "--json", "--timeline", "night")
    assert result.code == 0, result.err
    T = ended[2]
    data = json.loads(result.out)["timeline"]
    assert [b["attempt"] for b in data["bars"]] == [1, 2]
    assert [s["state"] for s in data["bars"][0]["spans"]] == ["PROVISIONING", "SETTING_UP", "RUNNING", "RECOVERING"]
    assert data["marks"] == [{"at": pytest.approx(T + 1090.0), "kind": "preempted", "attempt": 1, "slice": None}]
    assert "timeline" not in json.loads(cli("show", "--json", "night").out)


def test_metrics_lines_are_tagged_with_the_attempt_they_fall_in(story):
    T = story[2]
    text = "\n".join([
        json.dumps({"step": 10, "time": T + 1085.0, "loss": 5.0, "tokens_per_s": 100.0, "mfu": None}),
        '{"step": 20, "time": 10',  # a line a crash cut short
        json.dumps({"step": 20, "time": T + 1089.0, "loss": 4.0, "tokens_per_s": 110.0, "mfu": 0.3}),
        "",
        json.dumps({"step": 15, "time": T + 1155.0, "loss": 4.5, "tokens_per_s": 90, "mfu": 0.31}),
        json.dumps({"step": 25, "time": T + 1190.0, "loss": "nan?", "tokens_per_s": 95, "mfu": 0.31}),
    ])
    found = curves.parse(text, _line(story).bars)
    assert [(p.attempt, p.step) for p in found.points] == [(1, 10), (1, 20), (2, 15), (2, 25)]
    assert found.skipped == 1
    assert found.points[0].values == {"loss": 5.0, "tokens_per_s": 100.0, "mfu": None}
    assert found.points[3].values["loss"] is None  # not a number: not drawn
    assert [(p.attempt, p.step) for p in found.resumes()] == [(2, 15)]


def test_cost_so_far_is_slice_time_at_the_list_price(story):
    from tpujob.catalogue import accelerator
    from tpujob.service.accounting import slice_cost

    ctx, job, T = story
    price = accelerator("v4-8").hourly_cost(spot=False)
    # Attempt 1 from 1010 to its end at 1090, attempt 2 from 1130 to now (1200).
    assert slice_cost(ctx.store.attempts(job.id), "on-demand", T + 1200.0) == pytest.approx(price * 150 / 3600)
    spot = accelerator("v4-8").hourly_cost(spot=True)
    assert slice_cost(ctx.store.attempts(job.id), "spot", T + 1200.0) == pytest.approx(spot * 150 / 3600)
    # No published spot price for v5e (catalogue.py): unknown, not the on-demand one passed off.
    v5e = [SimpleNamespace(accelerator="v5litepod-4", started_at=T, ended_at=None, slices=1)]
    assert accelerator("v5litepod-4").hourly_cost(spot=True) is None
    assert slice_cost(v5e, "spot", T + 60.0) is None
    assert slice_cost(v5e, "on-demand", T + 3600.0) == pytest.approx(accelerator("v5litepod-4").hourly_cost(spot=False))
    # Several slices cost as many times one (multislice: every node is billed).
    two = [SimpleNamespace(accelerator="v4-16", started_at=T, ended_at=T + 3600.0, slices=2)]
    assert slice_cost(two, "spot", T + 7200.0) == pytest.approx(2 * accelerator("v4-16").hourly_cost(spot=True))


def test_the_dashboards_svg_marks_nan_restarts_and_escapes_text():
    from tpujob.service.timeline import Bar, Mark, Span, Timeline
    from tpujob.ui import svg

    line = Timeline(0.0, 100.0, (
        Bar(1, "s-1", "z", 0.0, 50.0, "nan", (Span("RUNNING", 0.0, 40.0), Span("RECOVERING", 40.0, 50.0))),
        Bar(2, "s-2", "z", 50.0, 100.0, None, (Span("<b>ODD</b>", 50.0, 100.0),))),
        (Mark(40.0, "nan", 1),))
    drawn = str(svg.timeline_svg(line))
    assert drawn.count('<g class="bar"') == 2
    assert 'class="mark" data-kind="nan" data-attempt="1"' in drawn
    assert "<b>" not in drawn and "&lt;b&gt;ODD&lt;/b&gt;" in drawn
    # The mark sits where attempt 1 ended: 40% along the drawn width.
    x = float(drawn.split('data-kind="nan"')[1].split('d="M')[1].split(",")[0]) + 6
    assert x == pytest.approx(svg.LABEL + 0.4 * (svg.WIDTH - svg.LABEL - svg.PAD), abs=0.2)


def test_a_multislice_attempt_is_a_row_per_slice_with_the_lost_slice_marked(cli):
    from tpujob.cli.timeline import print_timeline, timeline_dict
    from tpujob.ui import svg

    def attempt(number, start, end=None, reason=None, lost=None):
        return SimpleNamespace(number=number, slice_name=f"tpujob-000001-{number}", zone="z", started_at=start,
                               ended_at=end, end_reason=reason, slices=2, lost_slices=lost, nodes=None)

    job = SimpleNamespace(created_at=0.0, ended_at=None)
    events = [SimpleNamespace(at=0.0, to_state="PROVISIONING"), SimpleNamespace(at=10.0, to_state="RUNNING")]
    line = timeline(job, [attempt(1, 0.0, 50.0, "preempted", "1"), attempt(2, 60.0)], events, 100.0)
    assert [(b.attempt, b.slice, b.slice_name) for b in line.bars] == [
        (1, 0, "tpujob-000001-1-0"), (1, 1, "tpujob-000001-1-1"), (2, 0, "tpujob-000001-2-0"),
        (2, 1, "tpujob-000001-2-1")]
    assert [(m.attempt, m.slice, m.kind) for m in line.marks] == [(1, 1, "preempted")]  # slice 1 only
    drawn = str(svg.timeline_svg(line))
    assert drawn.count('<g class="bar"') == 4 and 'data-attempt="1" data-slice="1"' in drawn
    mark_y = float(drawn.split('data-kind="preempted"')[1].split('d="M')[1].split(",")[1].split(" ")[0])
    assert mark_y == svg.PAD + 1 * svg.ROW  # on slice 1's row, not slice 0's
    assert timeline_dict(line)["marks"] == [{"at": 50.0, "kind": "preempted", "attempt": 1, "slice": 1}]

    from io import StringIO

    from rich.console import Console

    out = StringIO()
    print_timeline(line, Console(file=out, width=80, highlight=False, soft_wrap=True))
    rows = out.getvalue().splitlines()[1:5]
    assert rows[0].startswith("attempt 1") and rows[1].startswith("  slice 1") and "preempted (slice 1)" in rows[1]
    assert "preempted" not in rows[0].split()[-1]  # slice 0 was not the one lost

    # Not knowing which slice was lost (a store from before lost_slices): every slice marked.
    unknown = timeline(job, [attempt(1, 0.0, 50.0, "preempted", None)], events, 100.0)
    assert [m.slice for m in unknown.marks] == [0, 1]
