"""The setup cache's archive is code (issue 45): a host unpacks it at / only when its sha256 is
the one host 0 reported on storing it; one replaced since, or with no digest recorded, is
refused, the setup runs instead, and host 0 stores its own in its place."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
import time

from tpujob.hosts import program
from tpujob.hosts.program import HostAttempt

KEY = "0123456789abcdef0123456789abcdef"
SETUP = 'mkdir -p ~/venv && echo "built by attempt $TPUJOB_ATTEMPT" > ~/venv/marker'


def setup(group, number: int, digest: str):
    att = HostAttempt(job_id="job-1", attempt=number, coordinator="127.0.0.1:8476", run_dir="/mnt/run",
                      workdir="code")
    script = program.setup_script(att, SETUP, cache_paths=("venv",), cache_archive=f"/mnt/cache/{KEY}",
                                  cache_digest=digest)
    program.start_setup(group, att, script)
    while (states := program.setup_state(group, att))[0].state == "running":
        time.sleep(0.1)
    (state,) = states
    assert (state.state, state.exit_code) == ("done", 0), state.said
    return state


def archive(machines):
    [found] = [p for p in (machines.host_root(0) / "mnt" / "cache").iterdir() if ".tmp-" not in p.name]
    return found


def stored(state) -> str:
    found = re.search(rf"\bstored [0-9.]+ sha256 ([0-9a-f]{{64}}) key {KEY}$", state.cache)
    assert found, state.cache
    return found[1]


def tampered() -> bytes:
    """What someone who can write the bucket might put there: a tar.gz that plants files."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, body in (("home/tpujob/venv/marker", b"tampered\n"), ("mnt/pwned", b"ran\n")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return out.getvalue()


def test_only_the_archive_host_0_stored_is_unpacked(slice_hosts):
    machines, group = slice_hosts(1)
    marker = machines.host_root(0) / "home" / "tpujob" / "venv" / "marker"
    first = setup(group, 1, "")
    assert first.cache.startswith("miss absent stored ")
    digest = stored(first)
    assert hashlib.sha256(archive(machines).read_bytes()).hexdigest() == digest  # what is in the bucket

    marker.unlink()
    assert setup(group, 2, digest).cache.startswith("hit ")  # verified, unpacked
    assert marker.read_text() == "built by attempt 1\n"

    archive(machines).unlink()
    (machines.host_root(0) / "mnt" / "cache" / f"{KEY}.tar.gz").write_bytes(tampered())
    third = setup(group, 3, digest)
    assert third.cache.startswith("miss mismatch stored ")  # refused, the setup ran, host 0 stored anew
    assert "refused: its sha256 is" in (machines.host_root(0) / "home/tpujob/.tpujob/jobs/job-1/attempt-3"
                                        / "setup.err").read_text()
    assert not (machines.host_root(0) / "mnt" / "pwned").exists()
    assert marker.read_text() == "built by attempt 3\n"
    again = stored(third)
    assert again != digest and hashlib.sha256(archive(machines).read_bytes()).hexdigest() == again

    fourth = setup(group, 4, "")  # an archive with no digest recorded: not trusted either
    assert fourth.cache.startswith("miss unverified stored ")
    assert marker.read_text() == "built by attempt 4\n"
