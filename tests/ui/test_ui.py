"""`tpujob ui` as a user meets it: the real command in a subprocess, asked over HTTP. The token
gate (401 without, 403 wrong, a cookie after the printed URL), the pages, escaping, and the
actions behind the CSRF field. The browser-driven run on the emulator is tests/e2e/test_ui_browser.py."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
from markupsafe import escape
from ui_browser import TOKEN, Browser, logged_in

from tpujob.service.context import Context


@pytest.fixture
def ui(tpujob_home):
    """`tpujob ui --port 0 --token TOKEN` on this test's store; its printed URL and a Browser."""
    proc = subprocess.Popen([sys.executable, "-m", "tpujob.cli.main", "ui", "--port", "0", "--token", TOKEN],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        first = proc.stdout.readline()
        url = proc.stdout.readline().strip()
        assert first.startswith("tpujob ui: serving"), first + proc.stderr.read()
        port = urlsplit(url).port
        yield url, Browser(port)
    finally:
        proc.terminate()
        proc.wait(10)


def test_every_page_needs_the_printed_token(ui):
    url, browser = ui
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=" + TOKEN, url)
    for path in ("/", "/jobs/1", "/fragment/jobs", "/static/ui.js", "/jobs/1/cancel"):
        status, _, text = browser.get(path)
        assert status == 401, path
        assert "token" in text
    status, _, text = browser.get("/?token=wrong")
    assert status == 403 and "wrong token" in text
    assert browser.cookie is None

    status, response, _ = browser.get(f"/?state=RUNNING&token={TOKEN}")
    assert status == 303
    # The token leaves the address bar (and any Referer); the other parameters stay. The pages
    # live under a path derived from the token (the cookie's Path: docs/ui.md).
    root, _, query = response.getheader("Location").partition("/?")
    assert re.fullmatch(r"/s/[0-9a-f]{32}", root) and query == "state=RUNNING"
    cookie = response.getheader("Set-Cookie")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and cookie.startswith("tpujob_ui_")
    assert f"Path={root}" in cookie
    assert browser.get("/")[0] == 401  # outside it, the cookie is not even looked at
    browser.root = root
    status, response, _ = browser.get("/")
    assert status == 200
    assert "default-src 'self'" in response.getheader("Content-Security-Policy")
    browser.cookie = browser.cookie.split("=")[0] + "=forged"
    assert browser.get("/")[0] == 403


def test_the_jobs_page_lists_and_filters_jobs(ui, story):
    browser = logged_in(ui)
    status, _, page = browser.get("/")
    assert status == 200
    assert 'data-state="RUNNING"' in page and ">night<" in page
    assert "on-demand" not in page  # a price, not the provisioning, is shown
    assert re.search(r"<td>\$\d+\.\d\d</td>", page)  # cost so far: v4-8 on demand has a list price
    assert "night" not in browser.get("/?state=FAILED")[2].split("<tbody")[1]
    assert "night" not in browser.get("/?name=other")[2].split("<tbody")[1]
    status, _, rows = browser.get("/fragment/jobs?name=nig")
    assert status == 200 and rows.lstrip().startswith("<tr") and "<html" not in rows


def test_the_job_page_draws_its_attempts_and_escapes_what_it_shows(ui, story):
    ctx, job, _ = story
    ctx.store.add_event(job.id, "note", "<script>alert(1)</script> said the host")
    browser = logged_in(ui)
    status, _, page = browser.get(f"/jobs/{job.id}")
    assert status == 200
    assert page.count('<g class="bar"') == 2
    assert page.count('class="mark" data-kind="preempted" data-attempt="1"') == 1
    assert "&lt;script&gt;alert(1)&lt;/script&gt; said the host" in page
    assert "<script>alert" not in page
    # No gs:// run dir: the page says why there are no curves instead of drawing none.
    assert "no curves: the run dir is on host 0" in page
    assert browser.get("/jobs/999")[0] == 404


def test_the_job_page_stacks_the_ledger_per_job_and_per_attempt(ui, story):
    ctx, job, _ = story
    browser = logged_in(ui)
    status, _, page = browser.get(f"/jobs/{job.id}")
    assert status == 200
    bars = re.findall(r'<g class="ledger-bar" data-label="([^"]+)">', page)
    assert bars == ["job", "attempt 1", "attempt 2"]
    job_bar = page.split('data-label="job">')[1].split("</g>")[0]
    segment = r'class="bucket" data-bucket="\w+" x="[\d.]+" y="\d+" width="([\d.]+)"'
    widths = [float(w) for w in re.findall(segment, job_bar)]
    assert sum(widths) == pytest.approx(900 - 120 - 12, abs=1.0)  # the buckets fill the bar: the wall time
    assert 'data-bucket="running"' in job_bar


def test_cancel_needs_the_csrf_field_and_the_cookie(ui, spec_file, story):
    ctx, _, _ = story
    from tpujob.service import jobs

    job, _ = jobs.record(ctx, str(spec_file("name: fresh\ntpu: {accelerator: v4-8, zone: us-central2-b}\n"
                                             "run: {command: train}\n")))
    browser = logged_in(ui)
    status, _, confirm = browser.get(f"/jobs/{job.id}/cancel")
    assert status == 200 and "Cancel job" in confirm
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', confirm).group(1)

    assert browser.post(f"/jobs/{job.id}/cancel", {"csrf": "0" * 64})[0] == 403
    assert browser.post(f"/jobs/{job.id}/cancel", {"csrf": csrf}, cookie=False)[0] == 401
    assert Context.load().store.get(job.id).state == "PENDING"

    status, response, _ = browser.post(f"/jobs/{job.id}/cancel", {"csrf": csrf})
    assert status == 303 and response.getheader("Location") == f"{browser.root}/jobs/{job.id}?done=cancel"
    assert Context.load().store.get(job.id).state == "CANCELLED"
    assert "cancel: done." in browser.get(f"/jobs/{job.id}?done=cancel")[2]


def test_a_refused_action_says_why(ui, story):
    ctx, job, _ = story
    browser = logged_in(ui)
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', browser.get(f"/jobs/{job.id}/resume")[2]).group(1)
    status, _, page = browser.post(f"/jobs/{job.id}/resume", {"csrf": csrf})
    assert status == 409
    assert "is RUNNING: only FAILED or CANCELLED jobs resume" in page
    assert Context.load().store.get(job.id).state == "RUNNING"


def test_serving_beyond_this_machine_needs_a_chosen_token(cli):
    result = cli("ui", "--host", "0.0.0.0")
    assert result.code == 2
    assert "pass --token" in result.error_line
    result = cli("ui", "--host", "0.0.0.0", "--token", "short")
    assert result.code == 2 and "at least 16 characters" in result.error_line


def test_a_taken_port_is_one_line(cli):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = cli("ui", "--port", str(taken.getsockname()[1]))
    assert result.code == 6
    assert "cannot listen on 127.0.0.1:" in result.error_line and "--port 0" in result.error_line


def test_the_job_page_gives_each_ended_attempts_cause_escaped(ui, story):
    ctx, job, _ = story
    ctx.store.record_cause(job.id, 1, "program exited 134 (SIGABRT: Aborted) on host 0: <b>Fatal</b> Python error")
    status, _, page = logged_in(ui).get(f"/jobs/{job.id}")
    assert status == 200 and "<th>CAUSE</th>" in page
    assert ('<td class="cause">program exited 134 (SIGABRT: Aborted) on host 0: &lt;b&gt;Fatal&lt;/b&gt; Python '
            "error</td>") in page


def test_the_spec_section_masks_a_webhook_urls_secret(ui, spec_file):
    """`show` and `validate --json` mask a literal webhook URL; the job page's Spec section,
    the YAML as submitted, masks it too (quoted or not, and in a comment), keeping the rest."""
    from tpujob.service import jobs

    job, _ = jobs.record(Context.load(), str(spec_file(
        "name: hooked  # posts to https://hooks.slack.com/services/T0/B0/s3cr3tPath\n"
        "tpu: {accelerator: v4-8, zone: us-central2-b}\nrun: {command: train}\n"
        "notify:\n  - webhook: https://hooks.slack.com/services/T0/B0/s3cr3tPath\n"
        "  - {webhook: 'https://example.org/hook?token=0th3rS3cret', on: [failed]}\n")))
    status, _, page = logged_in(ui).get(f"/jobs/{job.id}")
    assert status == 200
    assert "s3cr3tPath" not in page and "0th3rS3cret" not in page
    spec = page.split('<pre class="spec">')[1].split("</pre>")[0]
    assert "- webhook: &#34;https://hooks.slack.com/***&#34;" in spec
    assert "name: hooked  # posts to https://hooks.slack.com/***" in spec


def test_a_token_cookie_or_csrf_field_that_is_not_ascii_is_refused_not_a_500(ui, story):
    ctx, job, _ = story
    url, browser = ui
    status, _, text = browser.get("/?token=%C3%A9t%C3%A9")
    assert status == 403 and "wrong token" in text
    browser = logged_in(ui)
    assert browser.post(f"/jobs/{job.id}/cancel", {"csrf": "\u00e9t\u00e9"})[0] == 403
    name = browser.cookie.split("=")[0]
    # http.client sends a header as Latin-1, as a browser may send a cookie another app set.
    status, _, text = browser.get("/", headers={"Cookie": f"{name}=\u00e9t\u00e9"}, cookie=False)
    assert status == 403 and "wrong token" in text
    assert Context.load().store.get(job.id).state == "RUNNING"


def test_the_cookie_is_sent_to_no_other_server_on_the_address(ui):
    """A browser's cookie rules (the standard library's, RFC 6265's path-match) given the
    dashboard's Set-Cookie: it goes back with the dashboard's pages, and not to another web app
    on 127.0.0.1, whatever its port (cookies are not isolated by port) and wherever it points."""
    import http.cookiejar
    import urllib.request

    url, browser = ui
    parts = urlsplit(url)
    status, response, _ = browser.get(f"{parts.path}?{parts.query}")
    assert status == 303
    jar = http.cookiejar.CookieJar()
    jar.extract_cookies(response, urllib.request.Request(url))
    root = response.getheader("Location").rstrip("/")

    def sent(to: str) -> bool:
        request = urllib.request.Request(to)
        jar.add_cookie_header(request)
        return request.has_header("Cookie")

    assert sent(f"http://127.0.0.1:{browser.port}{root}/jobs/1")
    other = browser.port + 1 if browser.port < 65535 else browser.port - 1
    for path in ("/", "/jobs/1", "/static/ui.js", "/s/"):
        assert not sent(f"http://127.0.0.1:{other}{path}"), path


def test_a_host_header_naming_another_site_is_refused(ui, story):
    """DNS rebinding: a page on evil.example whose name now points at 127.0.0.1 reaches the port
    with `Host: evil.example`; refused before the token is looked at. Addresses, localhost and
    another port (an SSH tunnel's) are the dashboard's own."""
    url, browser = ui
    parts = urlsplit(url)
    for host in (f"evil.example:{browser.port}", "evil.example", f"localhost.evil.example:{browser.port}",
                 f"x@127.0.0.1:{browser.port}"):
        status, _, text = browser.get(f"{parts.path}?{parts.query}", headers={"Host": host})
        assert status == 403 and "answers only to the address it serves on" in text, host
        assert "evil" not in text
    browser = logged_in(ui)
    for host in (f"127.0.0.1:{browser.port}", f"localhost:{browser.port}", "127.0.0.1:9000", "[::1]:9000"):
        assert browser.get("/", headers={"Host": host})[0] == 200, host


def test_serving_to_other_machines_answers_to_this_machines_names():
    """`tpujob ui --host 0.0.0.0 --token ...` prints this machine's name: a browser elsewhere
    sends it (or the fully qualified one, or an address); `--host NAME` answers to NAME."""
    from tpujob.ui.app import host_allowed

    for name in (socket.gethostname(), socket.getfqdn(), "10.1.2.3", "[fd00::1]", "localhost"):
        assert host_allowed(f"{name}:8765", "0.0.0.0"), name
    assert host_allowed("login-7.lab.example.org:8765", "login-7.lab.example.org")
    assert not host_allowed("evil.example:8765", "0.0.0.0")
    assert not host_allowed("evil.example:8765", "login-7.lab.example.org")
    assert not host_allowed(None, "127.0.0.1") and not host_allowed("", "127.0.0.1")


def test_another_users_job_shows_its_owner_and_needs_the_force_box(ui, spec_file, story, monkeypatch):
    from tpujob.service import jobs

    monkeypatch.setenv("TPUJOB_USER", "alice@lab.example")  # this process records; the dashboard is not alice
    job, _ = jobs.record(Context.load(), str(spec_file("name: hers\ntpu: {accelerator: v4-8, zone: us-central2-b}\n"
                                                       "run: {command: train}\n")))
    browser = logged_in(ui)
    assert '<td class="owner">alice@lab.example</td>' in browser.get("/")[2]
    page = browser.get(f"/jobs/{job.id}")[2]
    assert f'<td class="owner">alice@lab.example (from {socket.gethostname()})</td>' in page
    status, _, confirm = browser.get(f"/jobs/{job.id}/cancel")
    assert status == 200 and "This is alice@lab.example" in confirm and 'name="force"' in confirm
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', confirm).group(1)
    status, _, page = browser.post(f"/jobs/{job.id}/cancel", {"csrf": csrf})
    assert status == 409 and "cancel it with --force" in page
    assert Context.load().store.get(job.id).state == "PENDING"
    status, _, _ = browser.post(f"/jobs/{job.id}/cancel", {"csrf": csrf, "force": "on"})
    assert status == 303 and Context.load().store.get(job.id).state == "CANCELLED"


def test_a_queued_job_page_says_why_it_waits(ui, spec_file, story):
    """The lab's scheduler (docs/scheduler.md): the reason the sweep recorded, in words."""
    from tpujob.reconcile.scheduling import admit_queued, demand_of

    store = Context.load().store
    # What the story's jobs hold, and room for one v4-8 more.
    store.set_quota("v4", 4 + sum(d.chips for d in map(demand_of, store.holding_jobs()) if d.family == "v4"))
    text = "name: q{}\ntpu: {{accelerator: v4-8, zone: us-central2-b}}\nrun: {{command: train}}\npriority: {}\n"
    first, _ = jobs_record(spec_file(text.format(1, "high")))
    second, _ = jobs_record(spec_file(text.format(2, "low")))
    admit_queued(store)
    browser = logged_in(ui)
    page = browser.get(f"/jobs/{second.id}")[2]
    assert store.get(first.id).state == "PENDING"
    assert '<tr><th>waiting for</th><td class="waiting">quota: ' in page and '; 1st in band low</td></tr>' in page
    assert '<td class="priority">low</td>' in page
    # Its place and estimated start, as `tpujob queue` has them: never a guess where the
    # holders' ends are not known, but whose.
    assert "<tr><th>queue</th><td class=\"queue\">position 1 in the lab's queue</td></tr>" in page
    owner = store.get(first.id).owner
    unknown = (f"unknown: {owner}'s job {story[1].id:06d} reports no ETA and has no max_run_duration; "
               f"{owner}'s job {first.id:06d} has not started running (PENDING)")
    assert f'<tr><th>starts</th><td class="starts">{escape(unknown)}</td></tr>' in page
    assert "waiting for" not in browser.get(f"/jobs/{first.id}")[2]


def jobs_record(path):
    from tpujob.service import jobs

    return jobs.record(Context.load(), str(path))
