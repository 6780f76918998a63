"""The dashboard's pictures, drawn on the server as inline SVG: the attempt timeline and the
training curves. No JavaScript and nothing fetched: a page works offline, saved or printed.
Pure: a Timeline or Curves in, markup out (every text escaped)."""

from __future__ import annotations

import time

from markupsafe import Markup, escape

# One colour per state a bar can show (the legend is drawn from this table).
STATE_COLOURS = {
    "PENDING": "#c8c8c8", "PROVISIONING": "#e8b33a", "SETTING_UP": "#4a7fe0", "RUNNING": "#2f9e55",
    "RECOVERING": "#e0662c", "CANCELLED": "#8c8c8c", "FAILED": "#c0392b", "SUCCEEDED": "#2f9e55",
    "DELETED": "#8c8c8c",
}
ATTEMPT_COLOURS = ("#2f6fdf", "#d9480f", "#2b8a3e", "#862e9c", "#c92a2a", "#1098ad", "#5c940d", "#e67700")
MARK_COLOURS = {"preempted": "#c0392b", "nan": "#862e9c"}

WIDTH, LABEL, ROW, PAD = 900, 120, 24, 12


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def timeline_svg(line) -> Markup:
    """One row per attempt (per slice of a multislice attempt), its spans coloured by state; a
    preemption or NaN restart is a mark where its attempt ended (on the slices it lost). Each
    element carries its attempt and state for a reader's tools."""
    span_w = WIDTH - LABEL - PAD
    height = PAD * 2 + ROW * max(1, len(line.bars)) + 28

    def x(at: float) -> float:
        return LABEL + (at - line.start) / line.seconds * span_w

    parts = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="attempt timeline">']
    for row, bar in enumerate(line.bars):
        y = PAD + row * ROW
        of_slice = "" if bar.slice is None else f' data-slice="{bar.slice}"'
        label = f"attempt {bar.attempt}" if bar.slice is None else (
            f"attempt {bar.attempt} · s{bar.slice}" if bar.slice == 0 else f"· slice {bar.slice}")
        parts.append(f'<g class="bar" data-attempt="{bar.attempt}"{of_slice}>')
        parts.append(f'<text x="4" y="{y + 15}" font-size="12">{label}<title>{escape(bar.slice_name)}</title></text>')
        for span in bar.spans:
            colour = STATE_COLOURS.get(span.state, "#777")
            parts.append(f'<rect class="span" data-state="{escape(span.state)}" x="{x(span.start):.1f}" '
                         f'y="{y + 3}" width="{max(1.0, x(span.end) - x(span.start)):.1f}" height="{ROW - 6}" '
                         f'fill="{colour}"><title>attempt {bar.attempt} {escape(span.state)}: '
                         f'{_clock(span.start)} to {_clock(span.end)} ({span.end - span.start:.0f} s)'
                         f'</title></rect>')
        parts.append("</g>")
    rows = {(bar.attempt, bar.slice): i for i, bar in enumerate(line.bars)}
    for mark in line.marks:
        mark_row = rows.get((mark.attempt, mark.slice))
        if mark_row is None:
            continue
        mx, y = x(mark.at), PAD + mark_row * ROW
        colour = MARK_COLOURS.get(mark.kind, "#000")
        parts.append(f'<path class="mark" data-kind="{escape(mark.kind)}" data-attempt="{mark.attempt}" '
                     f'd="M{mx - 6:.1f},{y} L{mx + 6:.1f},{y} L{mx:.1f},{y + 10} Z" fill="{colour}" '
                     f'stroke="#fff"><title>{escape(mark.kind)} at {_clock(mark.at)}</title></path>')
    axis_y = PAD + ROW * max(1, len(line.bars)) + 16
    parts.append(f'<text x="{LABEL}" y="{axis_y}" font-size="11">{_clock(line.start)}</text>')
    parts.append(f'<text x="{WIDTH - PAD}" y="{axis_y}" font-size="11" text-anchor="end">'
                 f'{_clock(line.end)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


# One colour per ledger bucket (service/ledger.BUCKETS), in the order the bar stacks them.
BUCKET_COLOURS = {
    "waiting": "#c8c8c8", "provisioning": "#e8b33a", "setup": "#4a7fe0", "restore": "#74c0fc",
    "compile": "#9775fa", "training": "#2f9e55", "running": "#8ce99a", "lost_work": "#c0392b",
    "checkpoint": "#1098ad", "hung": "#862e9c", "recovering": "#e0662c", "stopped": "#8c8c8c",
}


def ledger_svg(ledgers) -> Markup:
    """One stacked bar per ledger ([(label, Ledger)]: the job's, then each attempt's), its
    buckets in proportion to its own wall time; each segment titled with seconds and dollars."""
    height = PAD * 2 + ROW * max(1, len(ledgers))
    span_w = WIDTH - LABEL - PAD
    parts = [f'<svg class="ledger" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="where the wall time went">']
    for row, (label, led) in enumerate(ledgers):
        y, at = PAD + row * ROW, float(LABEL)
        wall = max(1e-9, led.wall_seconds)
        parts.append(f'<g class="ledger-bar" data-label="{escape(label)}">')
        parts.append(f'<text x="4" y="{y + 15}" font-size="12">{escape(label)}</text>')
        for name, colour in BUCKET_COLOURS.items():
            secs = led.buckets.get(name, 0.0)
            if secs <= 0:
                continue
            width = secs / wall * span_w
            usd = led.dollars.get(name)
            cost = "" if not usd else f", ${usd:.2f}"
            parts.append(f'<rect class="bucket" data-bucket="{name}" x="{at:.1f}" y="{y + 3}" '
                         f'width="{max(0.5, width):.1f}" height="{ROW - 6}" fill="{colour}"><title>'
                         f'{escape(label)} {name}: {secs:.0f} s ({secs / wall:.0%}{cost})</title></rect>')
            at += width
        parts.append("</g>")
    parts.append("</svg>")
    return Markup("".join(parts))


def ledger_legend() -> Markup:
    return Markup(" ".join(f'<span class="key"><i style="background:{c}"></i>{escape(b)}</span>'
                           for b, c in BUCKET_COLOURS.items()))


def legend() -> Markup:
    items = [f'<span class="key"><i style="background:{c}"></i>{escape(s)}</span>'
             for s, c in STATE_COLOURS.items() if s in ("PROVISIONING", "SETTING_UP", "RUNNING",
                                                           "RECOVERING", "CANCELLED")]
    items += [f'<span class="key"><i style="background:{c}"></i>{k}</span>' for k, c in MARK_COLOURS.items()]
    return Markup(" ".join(items))


CHART_W, CHART_H, LEFT, BOTTOM = 440, 220, 56, 28


def curve_svg(curves, key: str, label: str, *, against: str = "step") -> Markup:
    """One metric against step (or wall time): a line per attempt in its own colour, and a
    dashed rule where each later attempt resumed."""
    points = [p for p in curves.points if p.values.get(key) is not None]
    if not points:
        return Markup(f'<p class="muted">no {escape(label)} logged</p>')

    def xv(p) -> float:
        return p.step if against == "step" else p.time

    xs, ys = [xv(p) for p in points], [p.values[key] for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + abs(y0) * 0.1 + 1e-9)
    plot_w, plot_h = CHART_W - LEFT - 8, CHART_H - BOTTOM - 10

    def sx(v: float) -> float:
        return LEFT + (v - x0) / (x1 - x0) * plot_w

    def sy(v: float) -> float:
        return 10 + (1 - (v - y0) / (y1 - y0)) * plot_h

    parts = [f'<svg class="curve" data-metric="{escape(key)}" xmlns="http://www.w3.org/2000/svg" '
             f'width="{CHART_W}" height="{CHART_H}" viewBox="0 0 {CHART_W} {CHART_H}" role="img" '
             f'aria-label="{escape(label)} against {against}">',
             f'<rect x="{LEFT}" y="10" width="{plot_w}" height="{plot_h}" fill="none" stroke="#ccc"/>',
             f'<text x="4" y="16" font-size="11">{_num(y1)}</text>',
             f'<text x="4" y="{10 + plot_h}" font-size="11">{_num(y0)}</text>',
             f'<text x="{LEFT}" y="{CHART_H - 8}" font-size="11">'
             f'{escape(_num(x0) if against == "step" else _clock(x0))}</text>',
             f'<text x="{CHART_W - 8}" y="{CHART_H - 8}" font-size="11" text-anchor="end">'
             f'{escape(_num(x1) if against == "step" else _clock(x1))}</text>',
             f'<text x="{LEFT + plot_w / 2:.0f}" y="{CHART_H - 8}" font-size="11" text-anchor="middle">'
             f'{escape(label)} / {"step" if against == "step" else "time"}</text>']
    by_attempt: dict = {}
    for p in points:
        by_attempt.setdefault(p.attempt, []).append(p)
    for i, (attempt, own) in enumerate(by_attempt.items()):
        colour = ATTEMPT_COLOURS[i % len(ATTEMPT_COLOURS)]
        coords = " ".join(f"{sx(xv(p)):.1f},{sy(p.values[key]):.1f}" for p in own)
        parts.append(f'<polyline class="series" data-attempt="{attempt}" data-points="{len(own)}" '
                     f'points="{coords}" fill="none" stroke="{colour}" stroke-width="1.5">'
                     f'<title>attempt {attempt}: {len(own)} points</title></polyline>')
        if len(own) == 1:
            parts.append(f'<circle cx="{sx(xv(own[0])):.1f}" cy="{sy(own[0].values[key]):.1f}" r="2.5" '
                         f'fill="{colour}"/>')
    for p in curves.resumes():
        if p.values.get(key) is None:
            continue
        rx = sx(xv(p))
        parts.append(f'<line class="resume" data-attempt="{p.attempt}" x1="{rx:.1f}" y1="10" x2="{rx:.1f}" '
                     f'y2="{10 + plot_h}" stroke="#555" stroke-dasharray="4 3">'
                     f'<title>attempt {p.attempt} resumed at step {p.step}</title></line>')
    parts.append("</svg>")
    return Markup("".join(parts))
