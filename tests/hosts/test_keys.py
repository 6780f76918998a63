"""tpujob's SSH key: created once, private 600 in a 700 directory, and the .pub always the
public half of the private key, even when several commands start at once on a fresh home."""

from __future__ import annotations

import multiprocessing
import stat

from cryptography.hazmat.primitives import serialization

from tpujob.hosts import keys


def _public_of_private(path) -> str:
    private = serialization.load_ssh_private_key(path.read_bytes(), password=None)
    return private.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                             serialization.PublicFormat.OpenSSH).decode()


def _first_run(home: str, barrier, results) -> None:
    barrier.wait()  # every process past this line at once: the first-run race
    results.put(keys.public_key_line(home))


def test_first_use_creates_a_private_key_and_its_public_half(tmp_path):
    path = keys.ensure_key(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    line = keys.public_key_line(tmp_path)
    assert line == f"{_public_of_private(path)} tpujob"
    assert keys.ensure_key(tmp_path) == path and keys.public_key_line(tmp_path) == line  # reused
    assert keys.ssh_keys_metadata(tmp_path, "alice") == f"alice:{line}"
    assert not [p.name for p in path.parent.iterdir() if ".tmp" in p.name]  # no leftovers


def test_concurrent_first_runs_agree_on_one_key_pair(tmp_path):
    # forkserver, not fork: an xdist worker may have imported JAX (a runtime test ran there
    # first), and forking a process with JAX's threads can deadlock (JAX warns that it will).
    ctx = multiprocessing.get_context("forkserver")
    workers = 6
    for round_ in range(15):
        home = tmp_path / f"home{round_}"
        barrier, results = ctx.Barrier(workers), ctx.Queue()
        procs = [ctx.Process(target=_first_run, args=(str(home), barrier, results)) for _ in range(workers)]
        for p in procs:
            p.start()
        lines = {results.get(timeout=60) for _ in procs}
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        path = keys.key_path(home)
        # Every process saw the same public key, and it is the installed private key's.
        assert lines == {f"{_public_of_private(path)} tpujob"}, round_
        assert path.with_suffix(".pub").read_text().strip() in lines


def test_a_lost_public_half_is_rebuilt_from_the_private_key(tmp_path):
    path = keys.ensure_key(tmp_path)
    line = keys.public_key_line(tmp_path)
    path.with_suffix(".pub").unlink()
    assert keys.public_key_line(tmp_path) == line
    assert path.with_suffix(".pub").read_text().strip() == line
