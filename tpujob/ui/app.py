"""`tpujob ui`: a local web dashboard (Starlette, Jinja2 templates, served by uvicorn) over the
same service layer as the CLI. Each route reads through service.dashboard or acts through
service.jobs, then renders a template; nothing here touches the store or the cloud itself.

Security, as Jupyter does it: a random token (or `--token`) is printed once in the URL; the
first request that carries it gets it back as a cookie (HttpOnly, SameSite=Strict, named for the
port) and is redirected to the same page without it, so the token leaves the address bar and
never reaches a Referer. Every page, fragment and static file then needs that cookie (401
without one, 403 with a wrong one). Actions are POSTs carrying a CSRF field derived from the
token; SameSite=Strict alone would already keep another site's form from carrying the cookie.

Cookies are not isolated by port (RFC 6265 section 8.5): one set by 127.0.0.1:8765 goes to
every server on 127.0.0.1 the browser visits. So the pages live under a path derived from the
token (`root_of`) and the cookie is scoped to it (its Path): a browser sends it only with a
request for that path (RFC 6265 section 5.1.4), which no other server is asked for unless it
knows the path. A request whose Host header names another site is refused before anything else
(a DNS-rebinding page), as Jupyter refuses one (jupyter_server's `allow_remote_access`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import socket
import time
from pathlib import Path
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from tpujob.durations import duration_text
from tpujob.errors import ConflictError, NotFoundError, TpujobError, UsageError
from tpujob.names import format_job_id
from tpujob.progress import describe, step_text
from tpujob.service import dashboard
from tpujob.ui import svg

HERE = Path(__file__).parent
ACTIONS = ("cancel", "resume", "delete")
STATUS_OF = {NotFoundError: 404, ConflictError: 409, UsageError: 400}
HEADERS = {
    # Pages load nothing from elsewhere: a page that tried would be a bug (or an injection).
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def csrf_of(token: str) -> str:
    return hmac.new(token.encode(), b"tpujob-ui-csrf", hashlib.sha256).hexdigest()


def root_of(token: str) -> str:
    """The path every page lives under, and the cookie's Path: known only to whoever has the
    token (or a page of the dashboard's), so no other server on the address is asked for it."""
    return "/s/" + hmac.new(token.encode(), b"tpujob-ui-root", hashlib.sha256).hexdigest()[:32]


def cookie_name(port: int) -> str:
    return f"tpujob_ui_{port}"


def same(given: str, expected: str) -> bool:
    """A constant-time comparison of any two strings: compare_digest refuses str that is not
    ASCII with a TypeError (a non-ASCII token was a 500), bytes it compares whatever they hold."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


_HOST = re.compile(r"(?P<name>[A-Za-z0-9.-]+|\[(?P<v6>[0-9A-Fa-f:.]+)\])(?::\d{1,5})?")
WILDCARDS = ("0.0.0.0", "::", "")


def host_allowed(header: str | None, served: str) -> bool:
    """Whether a request's Host header names this dashboard, for one served on `served`
    (`--host`): an IP address (a page from an address is that address's own: no DNS to rebind),
    `localhost`, the `--host` name itself, and for a wildcard this machine's name (the printed
    URL's) and fully qualified name. The port is not checked: an SSH tunnel
    (`ssh -L 9000:127.0.0.1:8765`) makes the browser say its own."""
    match = _HOST.fullmatch(header or "")
    if match is None:
        return False
    name = (match.group("v6") or match.group("name")).lower().rstrip(".")
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    names = {"localhost", served.lower().rstrip(".")}
    if served in WILDCARDS:
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return name in names


class _TokenGate(BaseHTTPMiddleware):
    def __init__(self, app, token: str, cookie: str, root: str, served: str):
        super().__init__(app)
        self.token, self.cookie, self.root, self.served = token, cookie, root, served

    def _inside(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + "/")

    async def dispatch(self, request: Request, call_next):
        if not host_allowed(request.headers.get("host"), self.served):
            # Not echoed: the header is whatever a rebinding page's name is.
            return _plain(403, "this dashboard answers only to the address it serves on "
                               "(127.0.0.1, localhost, or its --host): open the URL `tpujob ui` printed")
        path = request.url.path
        given = request.query_params.get("token")
        if given is not None:
            if not same(given, self.token):
                return _plain(403, "wrong token: open the URL `tpujob ui` printed")
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            inner = path[len(self.root):] if self._inside(path) else path
            target = self.root + (inner or "/") + (f"?{urlencode(rest)}" if rest else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(self.cookie, self.token, path=self.root, httponly=True, samesite="strict",
                                secure=request.url.scheme == "https")
            return _headers(response)
        held = request.cookies.get(self.cookie) if self._inside(path) else None
        if held is None:
            return _plain(401, "a token is needed: open the URL `tpujob ui` printed (…/?token=...)")
        if not same(held, self.token):
            return _plain(403, "wrong token: open the URL `tpujob ui` printed")
        return _headers(await call_next(request))


def _plain(status: int, text: str) -> Response:
    return _headers(PlainTextResponse(text + "\n", status_code=status))


def _headers(response: Response) -> Response:
    response.headers.update(HEADERS)
    return response


def _age(at: float | None) -> str:
    if not at:
        return "-"
    return duration_text(time.time() - at)


def _clock(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else "-"


def _money(usd: float | None) -> str:
    return "unknown" if usd is None else f"${usd:,.2f}"


def make_app(context_factory, token: str, port: int, host: str = "127.0.0.1") -> Starlette:
    """The dashboard's ASGI app, served on `host`:`port`. `context_factory()` gives the service
    layer's Context (one is made once and shared: its store is thread-safe, and Starlette runs
    these views in threads)."""
    ctx = context_factory()
    csrf, root = csrf_of(token), root_of(token)
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))
    env.globals.update(job_id=format_job_id, age=_age, clock=_clock, money=_money, csrf=csrf, root=root,
                       step_text=step_text, describe_progress=describe,
                       legend=svg.legend, states=("PENDING", "PROVISIONING", "SETTING_UP", "RUNNING",
                                                  "RECOVERING", "SUCCEEDED", "FAILED", "CANCELLED",
                                                  "DELETED"))

    def page(template: str, status: int = 200, **values) -> HTMLResponse:
        return HTMLResponse(env.get_template(template).render(**values), status_code=status)

    def failed(exc: TpujobError) -> HTMLResponse:
        status = next((code for kind, code in STATUS_OF.items() if isinstance(exc, kind)), 502)
        return page("error.html", status=status, message=exc.message)

    def jobs(request: Request):
        state, name = request.query_params.get("state", ""), request.query_params.get("name", "")
        rows = dashboard.job_rows(ctx, state=state, name=name)
        template = "jobs_rows.html" if request.url.path.endswith("/fragment/jobs") else "jobs.html"
        return page(template, rows=rows, state=state, name=name)

    def job(request: Request):
        against = "time" if request.query_params.get("x") == "time" else "step"
        try:
            detail = dashboard.job_page(ctx, request.path_params["ref"])
        except TpujobError as exc:
            return failed(exc)
        charts = [(label, svg.curve_svg(detail.curves, key, label, against=against))
                  for key, label in dashboard.curves_mod.SERIES]
        template = "job_body.html" if request.query_params.get("fragment") else "job.html"
        return page(template, d=detail, timeline=svg.timeline_svg(detail.timeline), charts=charts,
                    ledger=svg.ledger_svg(detail.ledgers), ledger_legend=svg.ledger_legend,
                    against=against, done=request.query_params.get("done", ""))

    def log(request: Request):
        text, note = dashboard.log_tail(ctx, request.path_params["ref"])
        return page("log.html", text=text, note=note)

    def confirm(request: Request):
        action = request.path_params["action"]
        if action not in ACTIONS:
            return _plain(404, f"no action {action}")
        try:
            detail = ctx.store.find(request.path_params["ref"])
        except TpujobError as exc:
            return failed(exc)
        from tpujob.owners import current_user, is_others

        return page("confirm.html", job=detail, action=action, others=is_others(detail.owner, ctx.settings),
                    me=current_user(ctx.settings))

    async def act(request: Request):
        action = request.path_params["action"]
        if action not in ACTIONS:
            return _plain(404, f"no action {action}")
        form = await request.form()
        if not same(str(form.get("csrf", "")), csrf):
            return _plain(403, "the form's CSRF field is missing or wrong: reload the page")
        from starlette.concurrency import run_in_threadpool

        from tpujob.service import jobs as jobs_service

        ref = request.path_params["ref"]
        # Another user's job: the confirm page's --force box (jobs.check_owner refuses without it).
        kwargs = {} if action == "resume" else {"force": form.get("force") == "on"}
        try:
            job = await run_in_threadpool(getattr(jobs_service, action), ctx, ref, **kwargs)
        except TpujobError as exc:
            return failed(exc)
        return RedirectResponse(f"{root}/jobs/{job.id}?done={action}", status_code=303)

    pages = [
        Route("/", jobs),
        Route("/fragment/jobs", jobs),
        Route("/jobs/{ref}", job),
        Route("/jobs/{ref}/log", log),
        Route("/jobs/{ref}/{action}", confirm, methods=["GET"]),
        Route("/jobs/{ref}/{action}", act, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=[Mount(root, routes=pages)],
                     middleware=[Middleware(_TokenGate, token=token, cookie=cookie_name(port), root=root,
                                            served=host)])
