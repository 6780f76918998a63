"""What the dashboard's pages show (tpujob/ui): the same store, run dirs and hosts the CLI reads,
gathered per page. Nothing here renders; the actions are service.jobs' own."""

from __future__ import annotations

from dataclasses import dataclass, field

from tpujob.errors import TpujobError
from tpujob.hosts.host_output import redact
from tpujob.progress import Progress, of_attempt
from tpujob.service import curves as curves_mod
from tpujob.service.accounting import Accounting, account, goodput, slice_cost
from tpujob.service.context import Context
from tpujob.service.ledger import Ledger, attempt_ledgers, job_ledger, price_of
from tpujob.service.quotas import QueueRow, place_of
from tpujob.service.timeline import Timeline, timeline
from tpujob.spec import shown_text
from tpujob.spec.stored import spec_of
from tpujob.store.states import ENDED, State

LOG_LINES = 40
LOG_BYTES = 256 << 10  # what is kept of host 0's log while reading it, from its end


@dataclass(frozen=True)
class JobRow:
    job: object
    goodput: float
    cost_usd: float | None  # slice time so far at the catalogue's price; None: no published price
    progress: Progress | None = None  # the current attempt's step, total, rate and time left


@dataclass
class JobPage:
    job: object
    attempts: list
    events: list
    accounting: Accounting
    timeline: Timeline
    cost_usd: float | None
    curves: curves_mod.Curves
    actions: tuple[str, ...]  # what the user may do now: cancel, resume, delete
    progress: Progress | None = None
    spec_yaml: str = ""  # as submitted, literal webhook URLs masked (spec.shown_text)
    ledgers: list[tuple[str, Ledger]] = field(default_factory=list)  # the job's, then each attempt's
    queue: QueueRow | None = None  # a QUEUED job's reason, place and estimated start (`tpujob queue`'s)


def _provisioning(job) -> str:
    return spec_of(job).spec.tpu.provisioning


def job_rows(ctx: Context, *, state: str = "", name: str = "", include_ended: bool = True) -> list[JobRow]:
    """The jobs page: every job (newest first), filtered by state and a name substring."""
    jobs = ctx.store.list_jobs(include_ended=include_ended)
    if state:
        jobs = [j for j in jobs if j.state == state.upper()]
    if name:
        jobs = [j for j in jobs if name.lower() in j.name.lower()]
    attempts = ctx.store.attempts_of(j.id for j in jobs)
    now = ctx.store.clock()  # the records' clock: the store server's
    return [JobRow(j, goodput(j, now), slice_cost(attempts[j.id], _provisioning(j), now),
                   _progress(attempts[j.id])) for j in reversed(jobs)]


def _progress(attempts: list) -> Progress | None:
    return of_attempt(attempts[-1] if attempts else None)


def actions_for(state: str) -> tuple[str, ...]:
    """The buttons a job's page offers: service.jobs refuses the others anyway."""
    found = []
    if State(state) not in ENDED:
        found.append("cancel")
    if State(state) in (State.FAILED, State.CANCELLED):
        found.append("resume")
    if state != State.DELETED.value:
        found.append("delete")
    return tuple(found)


def job_page(ctx: Context, ref: str) -> JobPage:
    job = ctx.store.find(ref)
    attempts, events = ctx.store.attempts(job.id), ctx.store.events(job.id)
    now = ctx.store.clock()  # the records' clock: the store server's
    line = timeline(job, attempts, events, now)
    spec = spec_of(job)
    price = price_of(spec.provisioning)
    ledgers = [("job", job_ledger(job, attempts, events, now, price))] + [
        (f"attempt {n}", led) for n, led in attempt_ledgers(job, attempts, events, now, price)]
    return JobPage(job=job, attempts=attempts, events=events, accounting=account(job, attempts, events, now),
                   timeline=line, cost_usd=slice_cost(attempts, _provisioning(job), now),
                   curves=curves_mod.read(ctx, spec, job.id, line.bars), actions=actions_for(job.state),
                   spec_yaml=shown_text(job.spec_yaml, spec.spec), progress=_progress(attempts),
                   ledgers=ledgers, queue=place_of(ctx, job))


def log_tail(ctx: Context, ref: str, lines: int = LOG_LINES) -> tuple[str, str]:
    """(the last lines of host 0's log of the current attempt, a note on where they came from).
    Read as `tpujob logs` reads it: over SSH, else tpujob's local log of the host."""
    from tpujob.service import remote

    kept = bytearray()
    notes: list[str] = []

    def out(chunk: bytes) -> None:
        kept.extend(chunk)
        del kept[:-LOG_BYTES]

    try:
        remote.logs(ctx, ref, host=0, out=out, notice=notes.append)
    except TpujobError as exc:
        return "", exc.message
    text = "\n".join(kept.decode(errors="replace").splitlines()[-lines:])
    return redact(text, _secret_values(ctx, ref)), " ".join(notes)


def _secret_values(ctx: Context, ref: str) -> tuple[str, ...]:
    """The job's secret values this process can see (environment, secrets.env), redacted from
    the page: the program may print one. Credential-looking pairs are masked either way."""
    from tpujob.attempt import secrets

    return secrets.readable(spec_of(ctx.store.find(ref)).spec.secrets)
