"""Per-job accounting from the store: time in each state, goodput, lost steps. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from tpujob.store.states import AttemptEnd


@dataclass(frozen=True)
class Accounting:
    wall_seconds: float
    running_seconds: float
    goodput: float  # running time / wall time since creation
    seconds_in_state: dict[str, float] = field(default_factory=dict)
    lost_steps: list[dict] = field(default_factory=list)  # one per preempted attempt with known steps


def running_seconds(job, now: float) -> float:
    extra = now - job.state_since if job.state == "RUNNING" and job.state_since else 0.0
    return (job.running_seconds or 0.0) + max(0.0, extra)


def goodput(job, now: float) -> float:
    end = job.ended_at or now
    wall = max(1e-9, end - job.created_at)
    return min(1.0, running_seconds(job, end) / wall)


def account(job, attempts, events, now: float) -> Accounting:
    end = job.ended_at or now
    in_state: dict[str, float] = {}
    moves = [(e.at, e.to_state) for e in events if e.to_state]
    for (at, state), nxt in zip(moves, moves[1:] + [(end, None)]):
        in_state[state] = in_state.get(state, 0.0) + max(0.0, nxt[0] - at)
    lost = []
    for before, after in zip(attempts, attempts[1:]):
        if before.end_reason == AttemptEnd.PREEMPTED and before.last_step is not None:
            resumed = after.resumed_from_step if after.resumed_from_step is not None else 0
            lost.append({"attempt": before.number, "last_step": before.last_step,
                         "resumed_from_step": resumed, "lost_steps": max(0, before.last_step - resumed)})
    return Accounting(wall_seconds=end - job.created_at, running_seconds=running_seconds(job, end),
                      goodput=goodput(job, now), seconds_in_state=in_state, lost_steps=lost)


def slice_cost(attempts, provisioning: str, now: float) -> float | None:
    """USD spent on slices so far: each attempt's time from its start to its end (or now) at
    the catalogue's price for its accelerator and the spec's provisioning, times its slices
    (multislice). None when a price is not published (no estimate passed off as the real one:
    catalogue.py)."""
    from tpujob.catalogue import accelerator  # not for `list`, which imports goodput from here

    total = 0.0
    for a in attempts:
        price = accelerator(a.accelerator).price_for(provisioning)
        if price is None:
            return None
        total += price * a.slices * max(0.0, (a.ended_at or now) - a.started_at) / 3600
    return total
