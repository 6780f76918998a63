"""One contested write of the store's concurrency tests (test_store.py, test_postgres_store.py),
as each racing process makes it: won, lost to another process (the store's typed refusal), or
failed in any other way, which the test reports."""

from __future__ import annotations

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
