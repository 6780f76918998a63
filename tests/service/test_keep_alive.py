"""Sweeping (tpujob/service/keep_alive.py): what a sweep starts when there is nothing to sweep."""

from __future__ import annotations


def test_a_sweep_with_no_job_starts_no_emulator(cli, tpujob_home):
    """`tpujob requeue` from cron in a home with no job, on the local cloud (the default): there
    is no slice to look at, so no emulator is started, none left idle beside the cron line."""
    from tpujob.emulator import process

    done = cli("requeue")
    assert done.code == 0, done.err
    assert "sweep: 0 active" in done.out
    assert process.status() is None
    assert not (tpujob_home / "emulator").exists()
