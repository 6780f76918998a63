"""The typer CLI: each command parses, calls one service function, renders."""
