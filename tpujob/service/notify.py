"""Sending notifications: the outbox's due rows, in a thread beside the sweeps (`Courier`), and
`tpujob notify test`.

Webhooks get Slack-compatible JSON (`{"text": ...}`) by POST; email goes through the SMTP
server in `tpujob config` (smtp_*), its password the secret TPUJOB_SMTP_PASSWORD. Every message
has one deadline for all of it (name lookup, connect, TLS, request, every read: a server that
drips its answer a byte at a time is cut off there too), a redirect is a failure (never
followed: the URL's token would go wherever it points), and anything that goes wrong with one
message is recorded on its row, which stays pending for a later try: a notification never
stalls or fails a sweep.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Callable, Iterator, TypeVar

from tpujob.errors import ConfigError, NotFoundError, UsageError
from tpujob.service.context import Context
from tpujob.settings import knob
from tpujob.spec import NotifySpec
from tpujob.spec.stored import spec_of

WORKERS = 8
# Rows sent per round: a backlog drains over several rounds instead of holding one up.
BATCH = 64
# A claim outlives the send it covers (which ends by its deadline) by this much: the store
# writes around it.
CLAIM_MARGIN = 30.0
PASSWORD_SECRET = "TPUJOB_SMTP_PASSWORD"

T = TypeVar("T")
R = TypeVar("R")


class SendFailed(Exception):
    """One channel could not be told; the message is safe to show (no webhook URL in it)."""


@dataclass(frozen=True)
class Delivery:
    channel: int
    target: str  # masked: safe to print
    error: str = ""  # empty when sent

    @property
    def sent(self) -> bool:
        return not self.error


def target_of(channel: NotifySpec) -> str:
    """The channel as shown: an email address, or a webhook masked (spec.mask_webhook)."""
    from tpujob.spec import mask_webhook

    return channel.email if channel.email else f"webhook {mask_webhook(channel.webhook or '')}"


# -- one message's deadline ----------------------------------------------------------------------

class Deadline:
    """The one deadline of a message. A socket's own timeout bounds each read, not the answer: a
    server that sends a byte just within it every time holds a read loop for ever. So the send
    runs in a thread of its own (`within`), which is waited for until the deadline; then the
    sockets it registered (`guard`) are shut down, which ends a read blocked on them at once."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._end = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._sockets: list[Callable[[], socket.socket | None]] = []
        self._expired = False

    def missed(self) -> str:
        return f"no answer within {self.seconds:g} s"

    def left(self) -> float:
        """Seconds left (a timeout for the next step); SendFailed once there are none."""
        left = self._end - time.monotonic()
        if left <= 0 or self._expired:
            raise SendFailed(self.missed())
        return left

    def guard(self, socket_of: Callable[[], socket.socket | None]) -> None:
        """Shut the socket `socket_of()` gives (the connection's current one: TLS replaces it)
        down when the deadline passes."""
        with self._lock:
            self._sockets.append(socket_of)
            expired = self._expired
        if expired:
            _shut(socket_of())

    def expire(self) -> None:
        with self._lock:
            self._expired = True
            held = list(self._sockets)
        for socket_of in held:
            _shut(socket_of())


def _shut(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        # socket.socket's own shutdown, also for a TLS socket: ssl.SSLSocket.shutdown would drop
        # its TLS state under the thread still reading it. A shut down socket's blocked read
        # returns at once (close alone does not wake it).
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # not connected yet, or already closed


def within(seconds: float, attempt: Callable[[Deadline], None]) -> None:
    """Run `attempt(deadline)` in a daemon thread (a process that ends never waits for it) and
    wait for it until the deadline. SendFailed says why it did not succeed, whatever it raised:
    an unexpected error is named by its type only (its text may quote the webhook's URL)."""
    deadline = Deadline(seconds)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            attempt(deadline)
        except BaseException as exc:  # noqa: BLE001 - carried to the waiting thread, below
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True, name="notify-send")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        deadline.expire()
        raise SendFailed(deadline.missed())
    if raised:
        exc = raised[0]
        if isinstance(exc, SendFailed):
            raise exc
        raise SendFailed(f"unexpected {type(exc).__name__}") from None


# -- one send ---------------------------------------------------------------------------------

def _webhook_url(reference: str) -> str:
    from tpujob.attempt.secrets import resolve
    from tpujob.spec import WEBHOOK_SECRET

    match = WEBHOOK_SECRET.match(reference)
    if not match:
        return reference
    try:
        url = resolve([match.group(1)])[match.group(1)]
    except ConfigError as exc:
        raise SendFailed(exc.message) from None
    if not url.startswith(("http://", "https://")):
        raise SendFailed(f"secret {match.group(1)} is not an http:// or https:// URL")
    return url


def _split(url: str) -> tuple[str, str, int | None, str]:
    """(scheme, host, port, path with its query) of a webhook URL; SendFailed for a URL that is
    not one (the URL itself is not quoted: it holds the webhook's token)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:  # a bad port, or an unclosed [IPv6 literal
        raise SendFailed("malformed webhook URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SendFailed("malformed webhook URL: not http:// or https:// and a host")
    return parts.scheme, parts.hostname, port, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def post_webhook(reference: str, text: str, deadline: Deadline) -> None:
    """POST the text by http.client, which never follows a redirect (urllib's opener would, to
    wherever the answer points)."""
    scheme, host, port, target = _split(_webhook_url(reference))
    body = json.dumps({"text": text}).encode()
    kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    conn = kind(host, port, timeout=deadline.left())
    deadline.guard(lambda: conn.sock)
    try:
        conn.connect()
        deadline.left()  # the deadline passed while connecting: its socket may not be guarded
        conn.request("POST", target, body=body,
                     headers={"Content-Type": "application/json", "User-Agent": "tpujob"})
        response = conn.getresponse()
        response.read(4096)
    except http.client.HTTPException as exc:  # not HTTP at all
        raise SendFailed(f"no HTTP answer ({exc.__class__.__name__})") from None
    except TimeoutError:
        raise SendFailed(deadline.missed()) from None
    except OSError as exc:
        raise SendFailed(_reason(exc)) from None
    finally:
        conn.close()
    if 300 <= response.status < 400:
        raise SendFailed(f"HTTP {response.status} {response.reason}: a redirect, not followed")
    if not 200 <= response.status < 300:
        raise SendFailed(f"HTTP {response.status} {response.reason}")


def _reason(reason) -> str:
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror.lower()
    return str(reason)


def send_email(ctx: Context, address: str, subject: str, text: str, deadline: Deadline) -> None:
    import smtplib
    import ssl

    s = ctx.settings
    if not s.smtp_host or not s.smtp_from:
        raise SendFailed("email needs `tpujob config set smtp_host HOST` and `smtp_from ADDRESS`")
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = s.smtp_from, address, subject
    message.set_content(text)
    try:
        password = ""
        if s.smtp_username:
            from tpujob.attempt.secrets import resolve

            password = resolve([PASSWORD_SECRET])[PASSWORD_SECRET]
        # Connected in the constructor, which is what names the server for STARTTLS's
        # certificate check (smtplib keeps the host given there, not connect()'s); a greeting
        # other than 220 raises SMTPConnectError. Connect and greeting are bounded by the
        # socket's timeout, the rest by the guard, and the sweep by the sender's thread deadline.
        with smtplib.SMTP(s.smtp_host, int(s.smtp_port), timeout=deadline.left()) as smtp:
            deadline.guard(lambda: smtp.sock)
            if s.smtp_starttls == "true":
                # Without a context, smtplib's STARTTLS verifies nothing (Python docs,
                # smtplib.SMTP.starttls): the password would go to whoever answers. The default
                # context checks the chain against the system's CAs (or OpenSSL's SSL_CERT_FILE /
                # SSL_CERT_DIR: a lab's own CA) and the name against smtp_host.
                smtp.starttls(context=ssl.create_default_context())
            if s.smtp_username:
                smtp.login(s.smtp_username, password)
            smtp.send_message(message)
    except ConfigError as exc:
        raise SendFailed(exc.message) from None
    except smtplib.SMTPException as exc:
        raise SendFailed(f"SMTP: {exc.__class__.__name__}: {exc}") from None
    except ssl.SSLCertVerificationError as exc:
        raise SendFailed(f"SMTP {s.smtp_host}:{s.smtp_port}: its certificate is not trusted ({exc.verify_message}); "
                         "a private CA's certificate can be named in SSL_CERT_FILE") from None
    except TimeoutError:
        raise SendFailed(f"SMTP server gave no answer within {deadline.seconds:g} s") from None
    except OSError as exc:
        raise SendFailed(f"SMTP {s.smtp_host}:{s.smtp_port}: {_reason(exc)}") from None


def send(ctx: Context, channel: NotifySpec, text: str, timeout: float) -> None:
    """Tell one channel within `timeout` seconds in all; SendFailed says why not, whatever went
    wrong."""
    def attempt(deadline: Deadline) -> None:
        if channel.webhook:
            post_webhook(channel.webhook, text, deadline)
        else:
            # "tpujob: job 000042 'name' SUCCEEDED: why" -> the subject is up to the state.
            send_email(ctx, channel.email or "", ": ".join(text.split(": ", 2)[:2]), text, deadline)

    within(timeout, attempt)


def _each(fn: Callable[[T], R], items: list[T]) -> list[R]:
    """`fn` over `items`, WORKERS at a time, in daemon threads: a process that ends never waits
    for one (a pool's threads it would). `fn` raises nothing."""
    results: list[R | None] = [None] * len(items)
    order = iter(enumerate(items))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                nxt = next(order, None)
            if nxt is None:
                return
            results[nxt[0]] = fn(nxt[1])

    threads = [threading.Thread(target=work, daemon=True, name="notify") for _ in range(min(WORKERS, len(items)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results  # type: ignore[return-value]  # every slot was filled


# -- the outbox -------------------------------------------------------------------------------

def deliver_due(ctx: Context, *, limit: int = BATCH,
                may_start: Callable[[], bool] = lambda: True) -> list[Delivery]:
    """Send the outbox's due rows, each claimed first (compare-and-set), so sweeps running at
    once never send one twice; a failure is recorded for a later try (backoff), the last try
    gives up with an event on the job. A row is started only while `may_start()`; one not
    started stays due. Raises nothing for a message, whatever goes wrong with it."""
    from tpujob.store.outbox import Outboxes

    timeout = knob("NOTIFY_TIMEOUT")
    boxes = Outboxes(ctx.store.engine, clock=ctx.store.clock)
    rows = boxes.due(limit)
    if not rows:
        return []
    channels = _channels(ctx, {row.job_id for row in rows})
    ttl = timeout + CLAIM_MARGIN  # a row is never sent by a second sweep while the first is at it

    def one(row) -> Delivery | None:
        try:
            if not may_start():
                return None
            channel = channels.get(row.job_id, {}).get(row.channel)
            if channel is None or not boxes.claim(row.id, ctx.actor, ttl):
                return None
            try:
                send(ctx, channel, row.text, timeout)
            except SendFailed as exc:
                boxes.failed(row, ctx.actor, str(exc) or "failed")
                return Delivery(row.channel, target_of(channel), str(exc) or "failed")
            boxes.sent(row.id, ctx.actor)
            return Delivery(row.channel, target_of(channel))
        except Exception:  # noqa: BLE001 - the store's write failed: the claim expires, a later round retries
            return None

    return [o for o in _each(one, rows) if o is not None]


def _channels(ctx: Context, job_ids: set[int]) -> dict[int, dict[int, NotifySpec]]:
    found = {}
    for job_id in job_ids:
        try:
            found[job_id] = dict(enumerate(spec_of(ctx.store.get(job_id)).spec.notify))
        except NotFoundError:
            continue
        except Exception:  # noqa: BLE001 - a job whose stored spec does not read: its rows wait
            continue
    return found


class Courier:
    """Delivers the outbox in a thread of its own, beside the sweeps: a slow or dead endpoint
    never holds up a sweep's work on jobs. `wake()` after each sweep (its moves' rows are due);
    `close()` delivers what the last sweep made due and ends, bounded: sends already started
    are let finish (each within its deadline), none starts once a deadline has passed since
    the close, and a row not sent stays pending for the next sweep."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self._due = threading.Event()
        self._closing = threading.Event()
        self._start_by: float | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="notify-courier")
        self._thread.start()

    def wake(self) -> None:
        self._due.set()

    def _may_start(self) -> bool:
        return self._start_by is None or time.monotonic() < self._start_by

    def _run(self) -> None:
        while True:
            self._due.wait()
            self._due.clear()
            closing = self._closing.is_set()
            try:
                deliver_due(self.ctx, may_start=self._may_start)
            except Exception:  # noqa: BLE001 - a store that cannot be read now: the next round retries
                pass
            if closing:
                return

    def close(self) -> None:
        timeout = knob("NOTIFY_TIMEOUT")
        self._start_by = time.monotonic() + timeout
        self._closing.set()
        self._due.set()
        # A round in flight ends by then, the last one by a deadline later; the store's writes
        # around them get the claim's margin. Past that the process goes on (the thread is a
        # daemon), and a claimed row is sent again once its claim expires.
        self._thread.join(2 * timeout + CLAIM_MARGIN)


@contextmanager
def courier(ctx: Context) -> Iterator[Courier]:
    """A Courier for the block, woken at its start (rows due from before) and closed at its end."""
    running = Courier(ctx)
    running.wake()
    try:
        yield running
    finally:
        running.close()


# -- notify test ------------------------------------------------------------------------------

def send_test(ctx: Context, ref: str) -> tuple[object, list[Delivery]]:
    """Send a test message to each of the job's channels now (not through the outbox)."""
    from tpujob.names import format_job_id

    job = ctx.store.find(ref)
    channels = spec_of(job).spec.notify
    if not channels:
        raise UsageError(f"job {format_job_id(job.id)} has no notify channels in its spec")
    timeout = knob("NOTIFY_TIMEOUT")
    text = f"tpujob: job {format_job_id(job.id)} {job.name!r} TEST: a test message from `tpujob notify test`"

    def one(pair: tuple[int, NotifySpec]) -> Delivery:
        index, channel = pair
        try:
            send(ctx, channel, text, timeout)
        except SendFailed as exc:
            return Delivery(index, target_of(channel), str(exc) or "failed")
        return Delivery(index, target_of(channel))

    return job, _each(one, list(enumerate(channels)))
