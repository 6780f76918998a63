"""`tpujob ui` as a user meets it: the real command in a subprocess, asked over HTTP. The token
gate (401 without, 403 wrong, a cookie after the printed URL), the pages, escaping, and the
actions behind the CSRF field. The browser-driven run on the emulator is tests/e2e/test_ui_browser.py."""

from __future__ import annotations

import http.client
import os
import re
import socket
import subprocess
import sys
from urllib.parse import urlencode, urlsplit

import pytest
from job_story import story  # noqa: F401 - fixture

from tpujob.service.context import Context

TOKEN = "test-token-0123456789abcdef"


class Browser:
    """Just enough of one: requests to the dashboard, keeping the cookie it sets."""

    def __init__(self, port: int):
        self.port, self.cookie = port, None

    def request(self, method: str, path: str, body: dict | None = None, *, cookie: bool = True):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Cookie": self.cookie} if cookie and self.cookie else {}
        data = None
        if body is not None:
            data = urlencode(body)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        text = response.read().decode()
        if response.getheader("Set-Cookie"):
            self.cookie = response.getheader("Set-Cookie").split(";", 1)[0]
        return response.status, response, text

    def get(self, path: str, **kw):
        return self.request("GET", path, **kw)

    def post(self, path: str, body: dict, **kw):
        return self.request("POST", path, body, **kw)


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


def _logged_in(ui) -> Browser:
    url, browser = ui
    parts = urlsplit(url)
    status, response, _ = browser.get(f"{parts.path}?{parts.query}")
    assert status == 303
    return browser


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
    # The token leaves the address bar (and any Referer); the other parameters stay.
    assert response.getheader("Location") == "/?state=RUNNING"
    cookie = response.getheader("Set-Cookie")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and cookie.startswith("tpujob_ui_")
    status, response, _ = browser.get("/")
    assert status == 200
    assert "default-src 'self'" in response.getheader("Content-Security-Policy")
    browser.cookie = browser.cookie.split("=")[0] + "=forged"
    assert browser.get("/")[0] == 403


def test_the_jobs_page_lists_and_filters_jobs(ui, story):
    browser = _logged_in(ui)
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
    browser = _logged_in(ui)
    status, _, page = browser.get(f"/jobs/{job.id}")
    assert status == 200
    assert page.count('<g class="bar"') == 2
    assert page.count('class="mark" data-kind="preempted" data-attempt="1"') == 1
    assert "&lt;script&gt;alert(1)&lt;/script&gt; said the host" in page
    assert "<script>alert" not in page
    # No gs:// run dir: the page says why there are no curves instead of drawing none.
    assert "no curves: the run dir is on host 0" in page
    assert browser.get("/jobs/999")[0] == 404


def test_cancel_needs_the_csrf_field_and_the_cookie(ui, spec_file, story):
    ctx, _, _ = story
    from tpujob.service import jobs

    job, _ = jobs.record(ctx, str(spec_file("name: fresh\ntpu: {accelerator: v4-8, zone: us-central2-b}\n"
                                             "run: {command: train}\n")))
    browser = _logged_in(ui)
    status, _, confirm = browser.get(f"/jobs/{job.id}/cancel")
    assert status == 200 and "Cancel job" in confirm
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', confirm).group(1)

    assert browser.post(f"/jobs/{job.id}/cancel", {"csrf": "0" * 64})[0] == 403
    assert browser.post(f"/jobs/{job.id}/cancel", {"csrf": csrf}, cookie=False)[0] == 401
    assert Context.load().store.get(job.id).state == "PENDING"

    status, response, _ = browser.post(f"/jobs/{job.id}/cancel", {"csrf": csrf})
    assert status == 303 and response.getheader("Location") == f"/jobs/{job.id}?done=cancel"
    assert Context.load().store.get(job.id).state == "CANCELLED"
    assert "cancel: done." in browser.get(f"/jobs/{job.id}?done=cancel")[2]


def test_a_refused_action_says_why(ui, story):
    ctx, job, _ = story
    browser = _logged_in(ui)
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
    status, _, page = _logged_in(ui).get(f"/jobs/{job.id}")
    assert status == 200 and "<th>CAUSE</th>" in page
    assert ('<td class="cause">program exited 134 (SIGABRT: Aborted) on host 0: &lt;b&gt;Fatal&lt;/b&gt; Python '
            "error</td>") in page


def test_another_users_job_shows_its_owner_and_needs_the_force_box(ui, spec_file, story, monkeypatch):
    from tpujob.service import jobs

    monkeypatch.setenv("TPUJOB_USER", "alice@lab.example")  # this process records; the dashboard is not alice
    job, _ = jobs.record(Context.load(), str(spec_file("name: hers\ntpu: {accelerator: v4-8, zone: us-central2-b}\n"
                                                       "run: {command: train}\n")))
    browser = _logged_in(ui)
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
