"""The typer CLI: each command parses, calls one service function, renders."""

from __future__ import annotations


def context():
    """This machine's tpujob context (settings, store, cloud), loaded when a command runs: the
    import is deferred so that `tpujob --help` and `list` load no more than they use."""
    from tpujob.service.context import Context

    return Context.load()
