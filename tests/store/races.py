"""The store's concurrency tests (test_store.py, test_postgres_store.py): processes racing on one
store, and one contested write as each makes it: won, lost to another process (the store's
typed refusal), or failed in any other way, which the test reports."""

from __future__ import annotations

import multiprocessing
from typing import Any, Callable


def contest(errors: list[str], lost: type[Exception], write: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
    """`write(*args, **kwargs)`: True if this process won it. False if another did (`lost`
    raised) or it failed ("database is locked", a serialization failure, a deadlock: added to
    `errors`, which the test asserts empty)."""
    try:
        write(*args, **kwargs)
    except lost:
        return False
    except Exception as exc:  # noqa: BLE001 - every other failure is the test's to report
        errors.append(f"{type(exc).__name__}: {exc}")
        return False
    return True


def run_racers(target: Callable[..., None], arguments: list[tuple[Any, ...]], barrier_timeout: float,
               report_timeout: float) -> list[Any]:
    """One spawned process per tuple of `arguments`, each running `target(*its_arguments,
    barrier, results)`: they step together through `barrier` and put their reports on `results`.
    The reports, once every process has ended cleanly."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(arguments), timeout=barrier_timeout)
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, barrier, results)) for args in arguments]
    for p in procs:
        p.start()
    reports = [results.get(timeout=report_timeout) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    return reports
