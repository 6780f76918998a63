"""Sending notifications: the outbox's due rows after each sweep, and `tpujob notify test`.

Webhooks get Slack-compatible JSON (`{"text": ...}`) by POST; email goes through the SMTP
server in `tpujob config` (smtp_*), its password the secret TPUJOB_SMTP_PASSWORD. Every send
has a short timeout and the sends run on a bounded pool, so a dead endpoint holds a sweep up by
one timeout at most per round of the pool, and is tried again later, with backoff.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.message import EmailMessage

from tpujob.errors import ConfigError, NotFoundError, TpujobError, UsageError
from tpujob.service.context import Context
from tpujob.settings import tuning
from tpujob.spec import NotifySpec
from tpujob.spec.stored import spec_of

# Seconds one send may take (connect, and each read); TPUJOB_NOTIFY_TIMEOUT overrides it.
SEND_TIMEOUT = 5.0
WORKERS = 8
# Rows sent per sweep: a backlog drains over several sweeps instead of holding one up.
BATCH = 64
PASSWORD_SECRET = "TPUJOB_SMTP_PASSWORD"


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


def send_timeout() -> float:
    """TPUJOB_NOTIFY_TIMEOUT: seconds a channel may take."""
    return tuning("NOTIFY_TIMEOUT", SEND_TIMEOUT, 0, 120)


def target_of(channel: NotifySpec) -> str:
    """The channel as shown: an email address, or a webhook masked (spec.mask_webhook)."""
    from tpujob.spec import mask_webhook

    return channel.email if channel.email else f"webhook {mask_webhook(channel.webhook or '')}"


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


def post_webhook(reference: str, text: str, timeout: float) -> None:
    url = _webhook_url(reference)
    body = json.dumps({"text": text}).encode()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "tpujob"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read(4096)
    except urllib.error.HTTPError as exc:
        raise SendFailed(f"HTTP {exc.code} {exc.reason}") from None
    except (http.client.HTTPException, ValueError) as exc:  # not HTTP at all, or a malformed URL
        raise SendFailed(f"no HTTP answer ({exc.__class__.__name__})") from None
    except urllib.error.URLError as exc:
        raise SendFailed(_reason(exc.reason)) from None
    except TimeoutError:
        raise SendFailed(f"no answer within {timeout:g} s") from None
    except OSError as exc:
        raise SendFailed(_reason(exc)) from None


def _reason(reason) -> str:
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror.lower()
    return str(reason)


def send_email(ctx: Context, address: str, subject: str, text: str, timeout: float) -> None:
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
        with smtplib.SMTP(s.smtp_host, int(s.smtp_port), timeout=timeout) as smtp:
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
        raise SendFailed(f"SMTP server gave no answer within {timeout:g} s") from None
    except OSError as exc:
        raise SendFailed(f"SMTP {s.smtp_host}:{s.smtp_port}: {_reason(exc)}") from None


def send(ctx: Context, channel: NotifySpec, text: str, timeout: float) -> None:
    """Tell one channel; SendFailed says why not."""
    if channel.webhook:
        post_webhook(channel.webhook, text, timeout)
    else:
        # "tpujob: job 000042 'name' SUCCEEDED: why" -> the subject is up to the state.
        send_email(ctx, channel.email or "", ": ".join(text.split(": ", 2)[:2]), text, timeout)


# -- the outbox -------------------------------------------------------------------------------

def deliver_due(ctx: Context, *, limit: int = BATCH) -> list[Delivery]:
    """Send the outbox's due rows, each claimed first (compare-and-set), so sweeps running at
    once never send one twice; a failure is recorded for a later try (backoff), the last try
    gives up with an event on the job. Never raises for a send that failed."""
    from tpujob.store.outbox import Outboxes

    timeout = send_timeout()
    boxes = Outboxes(ctx.store.engine, clock=ctx.store.clock)
    rows = boxes.due(limit)
    if not rows:
        return []
    channels = _channels(ctx, {row.job_id for row in rows})
    # A claim outlives the slowest send: a row is never sent by a second sweep while the first
    # is still at it (SMTP's connect, STARTTLS, login and data each get `timeout`).
    ttl = 6 * timeout + 30

    def one(row) -> Delivery | None:
        channel = channels.get(row.job_id, {}).get(row.channel)
        if channel is None or not boxes.claim(row.id, ctx.actor, ttl):
            return None
        try:
            send(ctx, channel, row.text, timeout)
        except SendFailed as exc:
            boxes.failed(row, ctx.actor, str(exc))
            return Delivery(row.channel, target_of(channel), str(exc) or "failed")
        boxes.sent(row.id, ctx.actor)
        return Delivery(row.channel, target_of(channel))

    with ThreadPoolExecutor(max_workers=min(WORKERS, len(rows)), thread_name_prefix="notify") as pool:
        return [o for o in pool.map(one, rows) if o is not None]


def _channels(ctx: Context, job_ids: set[int]) -> dict[int, dict[int, NotifySpec]]:
    found = {}
    for job_id in job_ids:
        try:
            job = ctx.store.get(job_id)
        except NotFoundError:
            continue
        found[job_id] = dict(enumerate(spec_of(job).spec.notify))
    return found


def deliver_quietly(ctx: Context) -> None:
    """After a sweep: deliver what is due; a broken outbox (a bad setting) never fails the sweep."""
    try:
        deliver_due(ctx)
    except TpujobError:
        pass


# -- notify test ------------------------------------------------------------------------------

def send_test(ctx: Context, ref: str) -> tuple[object, list[Delivery]]:
    """Send a test message to each of the job's channels now (not through the outbox)."""
    from tpujob.names import format_job_id

    job = ctx.store.find(ref)
    channels = spec_of(job).spec.notify
    if not channels:
        raise UsageError(f"job {format_job_id(job.id)} has no notify channels in its spec")
    timeout = send_timeout()
    text = f"tpujob: job {format_job_id(job.id)} {job.name!r} TEST: a test message from `tpujob notify test`"

    def one(pair) -> Delivery:
        index, channel = pair
        try:
            send(ctx, channel, text, timeout)
        except SendFailed as exc:
            return Delivery(index, target_of(channel), str(exc) or "failed")
        return Delivery(index, target_of(channel))

    with ThreadPoolExecutor(max_workers=min(WORKERS, len(channels)), thread_name_prefix="notify") as pool:
        return job, list(pool.map(one, enumerate(channels)))
