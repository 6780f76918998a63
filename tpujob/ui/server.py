"""Serving the dashboard: the listening socket (bound here, so a taken port is a one-line error
before anything starts), the token, and uvicorn."""

from __future__ import annotations

import ipaddress
import secrets
import socket
from dataclasses import dataclass, field

from tpujob.errors import ConfigError, UsageError

MIN_TOKEN = 16


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class Dashboard:
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    sock: socket.socket | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.token is None:
            if not _loopback(self.host):
                # Anyone who can reach the address could read the URL's token off a shared
                # terminal's scrollback: off this machine, the user chooses (and keeps) it.
                raise UsageError(f"--host {self.host} is reachable from other machines: pass --token "
                                 f"(at least {MIN_TOKEN} characters) to serve there")
            self.token = secrets.token_urlsafe(24)
        elif len(self.token) < MIN_TOKEN:
            raise UsageError(f"--token must be at least {MIN_TOKEN} characters")
        if not 0 <= self.port <= 65535:
            raise UsageError(f"--port {self.port} is not a port (0 picks a free one)")

    def bind(self) -> None:
        """The listening socket; ConfigError (one line) when the address cannot be had."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise ConfigError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc} "
                              "(pick another with --port, or --port 0 for a free one)") from exc
        sock.listen(128)
        sock.set_inheritable(True)
        self.sock, self.port = sock, sock.getsockname()[1]

    @property
    def url(self) -> str:
        shown = socket.gethostname() if self.host in ("0.0.0.0", "::") else self.host
        shown = f"[{shown}]" if ":" in shown else shown
        return f"http://{shown}:{self.port}/?token={self.token}"

    def serve(self) -> None:
        """Serve until interrupted (Ctrl-C, SIGTERM)."""
        import uvicorn

        from tpujob.service.context import Context
        from tpujob.ui.app import make_app

        if self.sock is None:
            self.bind()
        sock, token = self.sock, self.token
        if sock is None or token is None:  # bind() and __post_init__ set them
            raise RuntimeError("the dashboard has no socket or no token")
        app = make_app(Context.load, token, self.port, self.host)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        uvicorn.Server(config).run(sockets=[sock])
