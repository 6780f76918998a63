"""How far a run has got, end to end on the emulator: a user's program writes the heartbeat's
`step` and `total` (docs/runtime.md) into its run dir; the sweeps read them on the hosts, and
`list` (STEP), `show` (a progress line), `show --json` (a progress block) and the dashboard
(a bar) tell the step, the rate over the last minutes and the time left."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from urllib.parse import urlsplit

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# 10 steps a second, to 5000; a heartbeat of the attempt's own, written whole (rename).
PROGRAM = ("python3 -c 'import json, os, time\n"
           "d = os.environ[\"TPUJOB_RUN_DIR\"]; os.makedirs(d, exist_ok=True)\n"
           "for step in range(5000):\n"
           "    beat = {\"step\": step, \"total\": 5000, \"attempt\": int(os.environ[\"TPUJOB_ATTEMPT\"])}\n"
           "    open(d + \"/.beat\", \"w\").write(json.dumps(beat)); os.replace(d + \"/.beat\", d + \"/heartbeat\")\n"
           "    time.sleep(0.1)'")

SPEC = f"""\
name: counting
tpu: {{accelerator: v4-8, zone: us-central2-b, queued: false}}
run: {{command: {json.dumps(PROGRAM)}}}
"""


def _show(cli) -> dict:
    result = cli("show", "--json", "counting")
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_list_show_and_the_dashboard_tell_the_step_the_rate_and_the_time_left(cli, local_cloud, tmp_path):
    spec = tmp_path / "counting.yaml"
    spec.write_text(SPEC)
    assert cli("create", spec).code == 0, "create"
    started = time.monotonic()
    while True:  # sweeps (as cron runs them) for long enough to have a rate
        assert cli("requeue").code == 0
        data = _show(cli)
        far = data["progress"]
        if far["steps_per_second"] is not None and time.monotonic() - started > 12:
            break
        assert time.monotonic() - started < 90, data
        time.sleep(1)

    assert far["total"] == 5000 and 0 < far["step"] < 5000
    assert data["step"] == far["step"] and data["total_steps"] == 5000
    assert 3 <= far["steps_per_second"] <= 11, far  # 10 a second, less the processes' own time
    assert far["seconds_left"] == pytest.approx((5000 - far["step"]) / far["steps_per_second"], abs=1)
    assert far["fraction"] == pytest.approx(far["step"] / 5000, abs=1e-4)

    listed = cli("list").out.splitlines()
    header, row = listed[0].split(), next(line for line in listed if "counting" in line).split()
    column = header.index("STEP")  # after OWNER, which a job made here has (one word: user@host)
    step, total = row[column].split("/")
    assert int(total) == 5000 and int(step) >= far["step"] - 1  # list reads the same store
    rows = json.loads(cli("list", "--json").out)
    assert [(r["step"] is not None, r["total_steps"]) for r in rows if r["name"] == "counting"] == [(True, 5000)]

    text = cli("show", "counting").out
    (line,) = [line for line in text.splitlines() if line.startswith("progress:")]
    assert "/5000 (" in line and "steps/s over the last" in line and line.endswith(" left"), line

    page = _dashboard_jobs_page()
    assert '<progress max="1" value="0.' in page and "/5000</td>" in page
    assert cli("delete", "counting").code == 0


def _dashboard_jobs_page() -> str:
    """The jobs page of `tpujob ui` on this test's store, as a browser gets it (token, cookie)."""
    token = "progress-token-0123456789"
    proc = subprocess.Popen([sys.executable, "-m", "tpujob.cli.main", "ui", "--port", "0", "--token", token],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert proc.stdout.readline().startswith("tpujob ui: serving")
        port = urlsplit(proc.stdout.readline().strip()).port

        def get(path: str, cookie: str = "") -> http.client.HTTPResponse:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", path, headers={"Cookie": cookie} if cookie else {})
            return conn.getresponse()

        login = get(f"/?token={token}")
        cookie = login.getheader("Set-Cookie").split(";", 1)[0]
        answer = get(login.getheader("Location"), cookie)  # the pages' own path (docs/ui.md)
        assert answer.status == 200
        return answer.read().decode()
    finally:
        proc.terminate()
        proc.wait(10)
