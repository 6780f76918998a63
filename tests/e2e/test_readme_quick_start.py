"""The README's Quick start, verbatim, in a fresh home: every command succeeds, without the demo
before it and after it (a newcomer does not run the demo first; one who did keeps its job 1).

The run after the demo is also `tpujob demo`'s own end-to-end test (what a newcomer runs first,
from nothing to SUCCEEDED): the demo is the suite's slowest minute of set-up, so it runs once."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TPUJOB = str(Path(sys.executable).parent / "tpujob")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the demo, then a job followed to its end


def quick_start() -> list[list[str]]:
    """The commands of the README's Quick start block, comments dropped."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"^## Quick start\n\n```bash\n(.*?)^```", text, re.S | re.M)
    assert block, "README.md has no Quick start block"
    return [shlex.split(line, comments=True) for line in block.group(1).splitlines() if line.strip()]


def run(argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    assert argv[0] == "tpujob", argv
    return subprocess.run([TPUJOB, *argv[1:]], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


def serve_once(argv: list[str]) -> str:
    """`tpujob ui` runs until Ctrl-C: started, its printed URL opened, then stopped."""
    proc = subprocess.Popen([TPUJOB, *argv[1:]], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ))
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        url = lines[1].strip()
        assert url.startswith("http://127.0.0.1:8765/?token="), "".join(lines) + proc.stderr.read()
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())  # keeps the token's cookie
        with browser.open(url, timeout=30) as page:
            assert page.status == 200 and "demo" in page.read().decode()
        return url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.xdist_group("readme-quick-start")  # both serve `tpujob ui` on its default port, 8765
@pytest.mark.parametrize("demo_first", [False, True], ids=["fresh-home", "after-the-demo"])
def test_the_quick_start_runs_verbatim(demo_first, stand_in_crontab, tpujob_home):
    from tpujob.emulator import process

    commands = quick_start()
    assert [c[:2] for c in commands][:5] == [["tpujob", "config"], ["tpujob", "validate"], ["tpujob", "create"],
                                             ["tpujob", "emulator"], ["tpujob", "create"]]
    try:
        if demo_first:
            assert process.status() is None
            done = run(["tpujob", "demo"], timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]
            assert_the_demo_succeeded(done)
        for argv in commands:
            if argv[:2] == ["tpujob", "ui"]:
                serve_once(argv)
                continue
            done = run(argv)  # its timeout bounds a hang; the README makes no claim of speed
            assert done.returncode == 0, f"{shlex.join(argv)} exited {done.returncode}: {done.stderr[-3000:]}"
            if argv[:2] == ["tpujob", "logs"] and not demo_first:  # follows job 1, this one, to its end
                assert "succeeded at step 30" in done.stdout + done.stderr, done.stdout[-3000:]
        listed = run(["tpujob", "list", "--all"]).stdout
        assert listed.count("demo") == (2 if demo_first else 1), listed
        if demo_first:
            assert_the_demo_is_shown_with_the_emulator_stopped_and_restarted(process)
    finally:
        process.stop(grace=5)


def assert_the_demo_succeeded(done: subprocess.CompletedProcess) -> None:
    """`tpujob demo` on a fresh home: it started the emulator, recorded the example, followed
    it (with progress) to SUCCEEDED, then listed and showed it."""
    from tpujob.service.demo import example_spec

    assert done.stderr.startswith("emulator started (http://127.0.0.1:"), done.stderr[:500]
    assert "stop it with `tpujob emulator stop`" in done.stderr
    assert f"recorded from {example_spec()}" in done.stderr
    assert "program launched on 2 hosts" in done.stderr  # progress while following
    listing, shown = done.stdout.split("$ tpujob show 000001")
    assert "$ tpujob list --all" in listing and "SUCCEEDED" in listing
    assert "state:        SUCCEEDED" in shown and "attempts:" in shown


def assert_the_demo_is_shown_with_the_emulator_stopped_and_restarted(process) -> None:
    """With the emulator stopped, `show` answers from the store, says why the run dir is not
    readable, and starts nothing; restarted (on new ports), its storage still holds the run
    dir: the final verdict."""
    process.stop(grace=5)
    shown = run(["tpujob", "show", "--json", "1"])
    assert shown.returncode == 0, shown.stderr[-3000:]
    data = json.loads(shown.stdout)
    assert (data["state"], data["accelerator"]) == ("SUCCEEDED", "v4-16")
    assert data["run_dir"] is None and "emulator is not running" in data["run_dir_error"]
    assert process.status() is None
    process.start()
    data = json.loads(run(["tpujob", "show", "--json", "1"]).stdout)
    assert (data["run_dir"]["state"], data["run_dir"]["step"]) == ("succeeded", 30), data.get("run_dir_error")
