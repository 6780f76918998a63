"""The store's attempts read as risk evidence (reconcile/risk.py): per (zone, accelerator,
provisioning), how long requests waited for capacity and how long slices ran before an
interruption. Every job in the store counts, whoever submitted it: on a shared store, the lab's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from tpujob.reconcile.placement import NO_SLICE
from tpujob.reconcile.risk import Evidence, Key, Sample, evidence
from tpujob.spec.stored import spec_of
from tpujob.store.states import AttemptEnd

if TYPE_CHECKING:
    from tpujob.store.repository import Store


def samples_of(attempts: Sequence[Any], events: Sequence[Any], provisioning: str, now: float) -> list[Sample]:
    """A job's attempts as evidence: READY is the first SETTING_UP move after an attempt's start
    (its slice came up); an attempt that never had one waited its whole life for capacity."""
    readies = sorted(e.at for e in events if e.to_state == "SETTING_UP")
    out = []
    for a in attempts:
        end = a.ended_at if a.ended_at is not None else now
        ready = next((t for t in readies if a.started_at <= t <= end), None)
        key = Key(a.zone, a.accelerator, provisioning)
        if a.end_reason in NO_SLICE or (ready is None and a.ended_at is not None):
            out.append(Sample(key, end - a.started_at, False, 0.0, False))
        elif ready is not None:
            out.append(Sample(key, ready - a.started_at, True, end - ready, a.end_reason == AttemptEnd.PREEMPTED))
    return out


def history(store: Store, now: float) -> dict[Key, Evidence]:
    """Every job's attempts in the store as evidence."""
    jobs = store.list_jobs(include_ended=True)
    attempts = store.attempts_of([j.id for j in jobs])
    samples: list[Sample] = []
    for job in jobs:
        if attempts.get(job.id):
            samples += samples_of(attempts[job.id], store.events(job.id), spec_of(job).provisioning, now)
    return evidence(samples)


def mtbi_for(store: Store, zone: str, accelerator: str, provisioning: str, now: float) -> tuple[float, Evidence]:
    """The mean seconds between interruptions for a placement (risk.Evidence.mtbi, shrunk toward
    the lab's mean for the accelerator), and the evidence it rests on."""
    from tpujob.reconcile.risk import prior_mtbi

    found = history(store, now)
    mine = found.get(Key(zone, accelerator, provisioning), Evidence())
    return mine.mtbi(prior_mtbi(found, accelerator, provisioning)), mine
