"""Notifications: outbox rows written with the state move, sent after a sweep to a real local
webhook receiver and SMTP server, retried with backoff, given up with an event; webhook URLs
masked everywhere they are shown; `tpujob notify test`."""

from __future__ import annotations

import json
import threading
from contextlib import closing

import pytest
from notify_servers import Drip, Mailbox, Silent, Webhook, free_port, own_ca
from spec_texts import dedent_spec
from sqlalchemy import text

from tpujob.store import outbox as outbox_mod
from tpujob.store.states import EndReason, State

SECRET_PATH = "/services/T000/B000/s3cr3tPath"
# How long a test waits for what a deadline of a second or so must end: only a delivery that
# never ends (the fault under test) reaches it.
HANG = 60.0


@pytest.fixture
def webhook():
    with closing(Webhook()) as hook:
        yield hook


@pytest.fixture
def mailbox(monkeypatch):
    with closing(Mailbox()) as box:
        for key, value in box.settings().items():
            monkeypatch.setenv(key, value)
        yield box


@pytest.fixture
def silent():
    with closing(Silent()) as s:
        yield s


@pytest.fixture
def ctx():
    from tpujob.service.context import Context

    return Context.load()


def spec_with(channels: list[dict]) -> str:
    return dedent_spec(f"""
        name: demo
        tpu: {{accelerator: v4-8, zone: us-central2-b}}
        run: {{command: python train.py}}
        notify: {json.dumps(channels)}
        """)


def record(ctx, spec_file, channels: list[dict]):
    from tpujob.service import jobs

    job, _ = jobs.record(ctx, str(spec_file(spec_with(channels))))
    return job


def run_to(ctx, job_id: int, *moves) -> None:
    """Walk the job through `moves`, each (dst, fields), from its current state."""
    for dst, fields in moves:
        job = ctx.store.get(job_id)
        ctx.store.transition(job_id, State(job.state), dst, f"to {dst.value}", **fields)


TO_RUNNING = [(State.PROVISIONING, {}), (State.SETTING_UP, {}), (State.RUNNING, {})]


def outbox_rows(ctx, job_id: int):
    return outbox_mod.Outboxes(ctx.store.engine).rows(job_id)


# -- which moves are told ------------------------------------------------------------------------

def test_each_asked_for_move_writes_one_row_per_channel_in_its_transaction(ctx, spec_file, webhook):
    job = record(ctx, spec_file, [{"webhook": webhook.url(), "on": ["preempted", "nan", "succeeded"]},
                                  {"email": "me@example.org"}])  # default: succeeded, failed
    run_to(ctx, job.id, *TO_RUNNING)
    assert outbox_rows(ctx, job.id) == []
    run_to(ctx, job.id, (State.RECOVERING, {"preemptions": 1}), *TO_RUNNING,
           (State.RECOVERING, {"nan_restarts": 1}), (State.SETTING_UP, {}), (State.RUNNING, {}),
           (State.SUCCEEDED, {}))
    rows = outbox_rows(ctx, job.id)
    assert [(r.kind, r.channel) for r in rows] == [("preempted", 0), ("nan", 0), ("succeeded", 0),
                                                   ("succeeded", 1)]
    assert all(r.status == "pending" and r.attempts == 0 for r in rows)
    # Each row points at the event of its move.
    events = {e.id: e for e in ctx.store.events(job.id)}
    assert [events[r.event_id].to_state for r in rows] == ["RECOVERING", "RECOVERING", "SUCCEEDED", "SUCCEEDED"]
    assert "SUCCEEDED: to SUCCEEDED" in rows[-1].text


def test_resume_cancel_and_failure_kinds(ctx, spec_file, webhook):
    job = record(ctx, spec_file, [{"webhook": webhook.url(), "on": ["failed", "cancelled", "preempted"]}])
    run_to(ctx, job.id, (State.CANCELLED, {}))
    # `resume` resets the counters to 0: not a preemption.
    run_to(ctx, job.id, (State.RECOVERING, {"preemptions": 0, "nan_restarts": 0, "failures": 0}))
    ctx.store.transition(job.id, State.RECOVERING, State.FAILED, "budget spent",
                         end_reason=EndReason.PREEMPTION_BUDGET, preemptions=21)
    assert [r.kind for r in outbox_rows(ctx, job.id)] == ["cancelled", "failed"]


def test_a_refused_move_writes_no_row(ctx, spec_file, webhook):
    from tpujob.errors import IllegalTransition

    job = record(ctx, spec_file, [{"webhook": webhook.url(), "on": ["cancelled"]}])
    with pytest.raises(IllegalTransition):
        ctx.store.transition(job.id, State.RUNNING, State.CANCELLED, "not running")
    assert outbox_rows(ctx, job.id) == []


def test_clean_forgets_the_jobs_notifications(ctx, spec_file, webhook):
    job = record(ctx, spec_file, [{"webhook": webhook.url(), "on": ["cancelled"]}])
    run_to(ctx, job.id, (State.CANCELLED, {}))
    ctx.store.remove(job.id)
    with ctx.store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM outbox")).scalar() == 0


# -- delivery ------------------------------------------------------------------------------------

def test_delivery_sends_each_row_once_to_webhook_and_email(mailbox, ctx, spec_file, webhook):
    from tpujob.service.notify import deliver_due

    job = record(ctx, spec_file, [{"webhook": webhook.url(SECRET_PATH)}, {"email": "me@example.org"}])
    run_to(ctx, job.id, *TO_RUNNING, (State.SUCCEEDED, {}))
    outcomes = deliver_due(ctx)
    assert sorted(o.sent for o in outcomes) == [True, True]
    assert webhook.paths == [SECRET_PATH]
    assert webhook.texts == ["tpujob: job 000001 'demo' SUCCEEDED: to SUCCEEDED"]
    assert [m["to"] for m in mailbox.messages] == [["me@example.org"]]
    assert mailbox.subjects() == ["tpujob: job 000001 'demo' SUCCEEDED"]
    assert all(r.status == "sent" and r.attempts == 1 for r in outbox_rows(ctx, job.id))
    assert deliver_due(ctx) == []  # nothing twice
    assert len(webhook.posts) == 1 and len(mailbox.messages) == 1


def test_dead_webhooks_fail_within_their_timeout_and_are_retried_later(ctx, spec_file, webhook, silent,
                                                                      monkeypatch):
    import time

    from tpujob.service.notify import deliver_due

    monkeypatch.setenv("TPUJOB_NOTIFY_TIMEOUT", "0.5")
    refused_port = free_port()  # nothing listens there (yet)
    job = record(ctx, spec_file, [{"webhook": f"http://127.0.0.1:{refused_port}{SECRET_PATH}"},
                                  {"webhook": silent.url()}, {"webhook": webhook.url()}])
    run_to(ctx, job.id, *TO_RUNNING, (State.SUCCEEDED, {}))
    before = time.time()
    started = time.monotonic()
    outcomes = {o.channel: o for o in deliver_due(ctx)}
    print(f"delivery with two dead webhooks (timeout 0.5 s): {time.monotonic() - started:.2f} s")
    assert outcomes[0].error == "connection refused"
    assert outcomes[1].error in ("no answer within 0.5 s", "timed out")
    assert outcomes[2].sent and len(webhook.posts) == 1  # the live one is not held up
    rows = {r.channel: r for r in outbox_rows(ctx, job.id)}
    for channel in (0, 1):
        assert rows[channel].status == "pending" and rows[channel].attempts == 1
        assert rows[channel].next_try >= before + outbox_mod.BACKOFF_SECONDS
        assert rows[channel].claimed_by is None
    assert rows[0].last_error == "connection refused"
    assert deliver_due(ctx) == []  # not due yet: backoff

    # Later: the refused endpoint is up; its row is due again and goes, once.
    revived = Webhook(port=refused_port)
    try:
        _make_due(ctx)
        outcomes = {o.channel: o for o in deliver_due(ctx)}
        assert outcomes[0].sent
        assert revived.paths == [SECRET_PATH]
        assert not outcomes[1].sent
        rows = {r.channel: r for r in outbox_rows(ctx, job.id)}
        assert (rows[0].status, rows[0].attempts) == ("sent", 2)
        assert (rows[1].status, rows[1].attempts) == ("pending", 2)
        assert rows[1].next_try - time.time() > outbox_mod.BACKOFF_SECONDS  # doubled
        assert len(webhook.posts) == 1
    finally:
        revived.close()


def _make_due(ctx) -> None:
    with ctx.store.engine.begin() as conn:
        conn.execute(text("UPDATE outbox SET next_try = 0 WHERE status = 'pending'"))


def test_the_last_try_gives_up_with_an_event_that_hides_the_url(ctx, spec_file, cli):
    from tpujob.service.notify import deliver_due

    url = f"http://127.0.0.1:{free_port()}{SECRET_PATH}"
    job = record(ctx, spec_file, [{"webhook": url}])
    run_to(ctx, job.id, *TO_RUNNING, (State.SUCCEEDED, {}))
    with ctx.store.engine.begin() as conn:
        conn.execute(text("UPDATE outbox SET attempts = :n"), {"n": outbox_mod.MAX_TRIES - 1})
    deliver_due(ctx)
    (row,) = outbox_rows(ctx, job.id)
    assert (row.status, row.attempts) == ("gave_up", outbox_mod.MAX_TRIES)
    _make_due(ctx)
    assert deliver_due(ctx) == []
    last = ctx.store.events(job.id)[-1]
    assert last.kind == "notify"
    assert last.message == (f"gave up notifying notify[0] of succeeded after {outbox_mod.MAX_TRIES} tries: "
                            "connection refused")
    shown = cli("show", str(job.id), "--json")
    assert shown.code == 0 and "s3cr3t" not in shown.out and "s3cr3t" not in shown.err


def test_a_webhook_secret_is_read_at_send_time_and_never_stored(ctx, spec_file, webhook, monkeypatch):
    from tpujob.service.notify import deliver_due

    monkeypatch.setenv("SLACK_WEBHOOK_URL", webhook.url(SECRET_PATH))
    job = record(ctx, spec_file, [{"webhook": "${SLACK_WEBHOOK_URL}"}])
    run_to(ctx, job.id, *TO_RUNNING, (State.SUCCEEDED, {}))
    with ctx.store.engine.connect() as conn:
        dump = "\n".join(str(row) for table in ("job", "event", "outbox")
                         for row in conn.execute(text(f"SELECT * FROM {table}")))
    assert "s3cr3t" not in dump
    (outcome,) = deliver_due(ctx)
    assert outcome.sent and outcome.target == "webhook ${SLACK_WEBHOOK_URL}"
    assert webhook.paths == [SECRET_PATH]


def test_a_webhook_that_drips_its_answer_is_cut_off_at_its_deadline(ctx, spec_file, webhook, monkeypatch):
    """Each byte comes well within a read's timeout: only a deadline for the whole answer ends it."""
    from tpujob.service.notify import deliver_due

    monkeypatch.setenv("TPUJOB_NOTIFY_TIMEOUT", "1")
    drip = Drip()
    try:
        job = record(ctx, spec_file, [{"webhook": drip.url()}, {"webhook": webhook.url()}])
        run_to(ctx, job.id, *TO_RUNNING, (State.SUCCEEDED, {}))
        done: list = []
        delivery = threading.Thread(target=lambda: done.append(deliver_due(ctx)), daemon=True)
        delivery.start()
        delivery.join(HANG)
        assert done, "the delivery never ended"
        outcomes = {o.channel: o for o in done[0]}
        assert outcomes[0].error == "no answer within 1 s"
        assert outcomes[1].sent and len(webhook.posts) == 1
        assert drip.ended.wait(HANG), "the dripping connection was left open"
        rows = {r.channel: r for r in outbox_rows(ctx, job.id)}
        assert (rows[0].status, rows[0].attempts, rows[0].last_error) == ("pending", 1, "no answer within 1 s")
        assert rows[0].claimed_by is None
    finally:
        drip.close()


def test_a_malformed_webhook_url_fails_its_own_row_only(ctx, spec_file, webhook, monkeypatch):
    from tpujob.service.notify import deliver_due

    monkeypatch.setenv("BROKEN_HOOK", "http://[s3cr3t/hook")  # an IPv6 literal never closed
    job = record(ctx, spec_file, [{"webhook": "${BROKEN_HOOK}"}, {"webhook": webhook.url()}])
    run_to(ctx, job.id, *TO_RUNNING, (State.SUCCEEDED, {}))
    outcomes = {o.channel: o for o in deliver_due(ctx)}
    assert outcomes[0].error == "malformed webhook URL"
    assert outcomes[1].sent and len(webhook.posts) == 1
    rows = {r.channel: r for r in outbox_rows(ctx, job.id)}
    assert (rows[0].status, rows[0].attempts, rows[0].last_error) == ("pending", 1, "malformed webhook URL")
    _make_due(ctx)
    (again,) = deliver_due(ctx)  # the next sweep tries it again, and fails the same way
    assert again.error == "malformed webhook URL"


def test_a_redirect_is_not_followed(ctx, spec_file, webhook):
    from tpujob.service.notify import deliver_due

    mover = Webhook(status=302, location=webhook.url("/elsewhere"))
    try:
        job = record(ctx, spec_file, [{"webhook": mover.url(SECRET_PATH)}])
        run_to(ctx, job.id, *TO_RUNNING, (State.SUCCEEDED, {}))
        (outcome,) = deliver_due(ctx)
        assert outcome.error == "HTTP 302 Found: a redirect, not followed"
        assert mover.requests == [("POST", SECRET_PATH)]
        assert webhook.requests == []  # where it pointed heard nothing
        (row,) = outbox_rows(ctx, job.id)
        assert (row.status, row.last_error) == ("pending", "HTTP 302 Found: a redirect, not followed")
    finally:
        mover.close()


def test_a_webhook_that_holds_its_answer_never_holds_up_the_sweeps(ctx, spec_file, monkeypatch):
    """`watch` sweeps on while a webhook keeps the first sweep's message waiting; the message goes
    once the webhook answers, before `watch` returns."""
    from tpujob.service import keep_alive

    monkeypatch.setenv("TPUJOB_NOTIFY_TIMEOUT", "120")
    gate = threading.Event()
    hook = Webhook(gate=gate)
    try:
        job = record(ctx, spec_file, [{"webhook": hook.url(), "on": ["succeeded"]}])
        run_to(ctx, job.id, *TO_RUNNING)
        third_sweep = threading.Event()
        sweeps: list[int] = []

        class Reconciler:
            def use_ssh_keys(self, keys):  # the lab's keys, read again before each sweep
                pass

            def sweep(self, ids=None):  # the first one ends the job (a move that notifies)
                if not sweeps:
                    run_to(ctx, job.id, (State.SUCCEEDED, {}))
                sweeps.append(len(sweeps) + 1)
                return len(sweeps)

        def on_report(report):
            if report == 3:
                third_sweep.set()

        monkeypatch.setattr(keep_alive, "reconciler", lambda ctx: Reconciler())
        watching = threading.Thread(target=keep_alive.watch, args=(ctx, 0.0, on_report, 3), daemon=True)
        watching.start()
        try:
            assert hook.arrived.wait(HANG), "the message was never sent"
            assert third_sweep.wait(HANG), "the sweeps waited for the webhook"
            assert hook.posts == []  # still held: the sweeps went on without it
        finally:
            gate.set()
        watching.join(HANG)
        assert not watching.is_alive()
        assert hook.texts == ["tpujob: job 000001 'demo' SUCCEEDED: to SUCCEEDED"]
        (row,) = outbox_rows(ctx, job.id)
        assert (row.status, row.attempts) == ("sent", 1)
    finally:
        gate.set()
        hook.close()


# `tpujob requeue` as cron runs it, its sweep one that finds nothing to do (no cloud needed):
# the process ends while a webhook still drips the answer to the message due from before.
_REQUEUE = """
from tpujob.service import keep_alive
from tpujob.service.context import Context


class Idle:
    def sweep(self, ids=None):
        return None


keep_alive.reconciler = lambda ctx: Idle()
keep_alive.requeue(Context.load())
"""


def test_requeue_ends_by_its_deadline_while_a_webhook_drips(ctx, spec_file, monkeypatch):
    import subprocess
    import sys

    monkeypatch.setenv("TPUJOB_NOTIFY_TIMEOUT", "2")
    drip = Drip()
    try:
        job = record(ctx, spec_file, [{"webhook": drip.url()}])
        run_to(ctx, job.id, *TO_RUNNING, (State.SUCCEEDED, {}))
        try:
            ending = subprocess.run([sys.executable, "-c", _REQUEUE], capture_output=True, text=True, timeout=HANG)
        except subprocess.TimeoutExpired:
            pytest.fail("requeue never ended")
        assert ending.returncode == 0, ending.stderr
        (row,) = outbox_rows(ctx, job.id)  # left for the next sweep, not claimed by a process now gone
        assert (row.status, row.claimed_by) == ("pending", None)
        # Tried and cut at its deadline; or, on a machine so loaded that the courier had not
        # started it within one deadline of the sweep's end, never started (the process ends
        # all the same: no send starts past that).
        assert (row.attempts, row.last_error) in {(1, "no answer within 2 s"), (0, None)}
        assert drip.connected.is_set() == (row.attempts == 1)
    finally:
        drip.close()


# -- notify test ---------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")  # a local test server
def test_notify_test_sends_to_each_channel_and_says_how_it_went(cli, ctx, spec_file, webhook, monkeypatch,
                                                                tpujob_home):
    box = Mailbox(username="lab", password="pa55word")
    try:
        for key, value in box.settings(username="lab").items():
            monkeypatch.setenv(key, value)
        tpujob_home.mkdir(parents=True, exist_ok=True)
        (tpujob_home / "secrets.env").write_text("TPUJOB_SMTP_PASSWORD=pa55word\n")
        (tpujob_home / "secrets.env").chmod(0o600)
        record(ctx, spec_file, [{"webhook": webhook.url(SECRET_PATH)}, {"email": "me@example.org"}])
        result = cli("notify", "test", "demo")
        assert result.code == 0, result
        assert result.out.splitlines() == [
            f"notify[0]  webhook http://127.0.0.1:{webhook.port}/***: sent",
            "notify[1]  me@example.org: sent"]
        assert webhook.texts == ["tpujob: job 000001 'demo' TEST: a test message from `tpujob notify test`"]
        assert box.logins == ["lab"] and len(box.messages) == 1
        # Nothing went through (or into) the outbox.
        assert outbox_rows(ctx, 1) == []
    finally:
        box.close()


def test_starttls_verifies_the_servers_certificate(cli, ctx, spec_file, monkeypatch, tmp_path):
    """STARTTLS to a server whose certificate no trusted CA signed is refused before the
    message (or a password) is sent; trusting the lab's own CA through SSL_CERT_FILE lets it
    through, verification still on."""
    ca_file, server_tls = own_ca(tmp_path)
    box = Mailbox(tls_context=server_tls)
    try:
        for key, value in box.settings(starttls="true").items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "no-cas"))
        record(ctx, spec_file, [{"email": "me@example.org"}])
        result = cli("notify", "test", "demo", "--json")
        assert result.code == 5, result
        [row] = json.loads(result.out)
        assert row["sent"] is False and "certificate is not trusted" in row["error"]
        assert "SSL_CERT_FILE" in row["error"] and box.messages == [], row

        monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
        result = cli("notify", "test", "demo")
        assert result.code == 0, result
        assert result.out.splitlines() == ["notify[0]  me@example.org: sent"]
        assert len(box.messages) == 1
    finally:
        box.close()


def test_notify_test_exits_5_naming_each_failure(cli, ctx, spec_file, webhook):
    dead = f"http://127.0.0.1:{free_port()}{SECRET_PATH}"
    record(ctx, spec_file, [{"webhook": webhook.url()}, {"webhook": dead}, {"email": "me@example.org"}])
    result = cli("notify", "test", "1", "--json")
    assert result.code == 5
    assert "s3cr3t" not in result.out
    rows = json.loads(result.out)
    assert [(r["channel"], r["sent"]) for r in rows] == [("notify[0]", True), ("notify[1]", False),
                                                         ("notify[2]", False)]
    assert rows[1]["error"] == "connection refused"
    assert rows[2]["error"] == "email needs `tpujob config set smtp_host HOST` and `smtp_from ADDRESS`"


def test_notify_test_without_channels_or_job(cli, ctx, spec_file):
    from spec_texts import VALID

    from tpujob.service import jobs

    jobs.record(ctx, str(spec_file(VALID)))
    result = cli("notify", "test", "demo")
    assert result.code == 2
    assert result.error_line == "error: job 000001 has no notify channels in its spec"
    assert cli("notify", "test", "nope").code == 3


# -- masking and settings ------------------------------------------------------------------------

def test_validate_masks_webhook_urls(cli, spec_file):
    path = spec_file(spec_with([{"webhook": f"https://hooks.slack.com{SECRET_PATH}", "on": ["failed"]}]))
    result = cli("validate", path, "--json")
    assert result.code == 0, result
    notify = json.loads(result.out)["spec"]["notify"]
    assert notify == [{"webhook": "https://hooks.slack.com/***", "email": None, "on": ["failed"]}]
    result = cli("validate", path)
    assert result.code == 0
    assert "notify:       webhook https://hooks.slack.com/*** on failed" in result.out.splitlines()
    assert "s3cr3t" not in result.out


def test_the_spec_as_submitted_is_shown_with_each_webhook_masked_where_it_is_written():
    """The dashboard's Spec section (spec.shown_text): a URL folded over two lines, an anchored
    one used through an alias and one in a comment are masked; a `${NAME}` reference and the
    layout are kept, and the text is still the same YAML with the masked URLs."""
    import yaml

    from tpujob.spec import parse, shown_text

    text = dedent_spec(f"""
        name: demo  # was https://hooks.slack.com{SECRET_PATH}
        tpu: {{accelerator: v4-8, zone: us-central2-b}}
        run: {{command: python train.py}}
        env: {{HOOK: &hook "https://example.org/a?token=s3cr3tToken"}}
        notify:
          - webhook: "https://hooks.slack.com/services/T000/\\
              B000/s3cr3tPath"
          - webhook: *hook
          - webhook: ${{SLACK_URL}}
        """)
    shown = shown_text(text, parse(text)[0])
    assert "s3cr3t" not in shown
    assert shown.splitlines()[0] == "name: demo  # was https://hooks.slack.com/***"
    assert yaml.safe_load(shown)["notify"] == [{"webhook": "https://hooks.slack.com/***"},
                                               {"webhook": "https://example.org/***"},
                                               {"webhook": "${SLACK_URL}"}]


def test_a_refused_webhook_is_not_quoted(cli, spec_file):
    result = cli("validate", spec_file(spec_with([{"webhook": f"ftp://hooks.example.org{SECRET_PATH}"}])))
    assert result.code == 2
    assert "s3cr3t" not in result.err and "hooks.example.org" not in result.err


def test_create_refuses_a_webhook_secret_without_a_value(cli, spec_file, stored_jobs):
    result = cli("create", spec_file(spec_with([{"webhook": "${NO_SUCH_HOOK}"}])))
    assert result.code == 6
    assert "secret NO_SUCH_HOOK not set" in result.error_line
    assert stored_jobs() == 0


@pytest.mark.parametrize("key, value, fragment", [
    ("smtp_port", "smtp", "smtp_port must be a port number from 1 to 65535, not 'smtp'"),
    ("smtp_starttls", "yes", "smtp_starttls must be true or false, not 'yes'"),
])
def test_bad_smtp_settings_are_refused(cli, key, value, fragment):
    result = cli("config", "set", key, value)
    assert result.code == 2
    assert fragment in result.error_line


def test_smtp_settings_are_kept_and_shown(cli):
    assert cli("config", "set", "smtp_host", "smtp.example.org").code == 0
    assert cli("config", "set", "smtp_port", "465").code == 0
    shown = json.loads(cli("config", "show", "--json").out)
    assert (shown["smtp_host"], shown["smtp_port"], shown["smtp_starttls"]) == ("smtp.example.org", "465", "true")
    assert "smtp_password" not in shown


@pytest.mark.parametrize("value", ["0", "121"])
def test_a_notify_timeout_of_0_or_past_120_is_refused(monkeypatch, value):
    # 0 s would send nothing (docs/notify.md: one deadline for the whole message).
    from tpujob.errors import ConfigError
    from tpujob.settings import knob

    monkeypatch.setenv("TPUJOB_NOTIFY_TIMEOUT", value)
    said = rf"^TPUJOB_NOTIFY_TIMEOUT must be seconds more than 0, up to 120, got '{value}'$"
    with pytest.raises(ConfigError, match=said):
        knob("NOTIFY_TIMEOUT")
