"""The ways an attempt ends that a job survives a number of times (preemptions, capacity misses,
NaN restarts, failures, bad hosts, hangs), one table of budgets, and what decide returns when it
spends one: end the attempt, free the slice where the budget says so, count, then RECOVERING
within the budget or FAILED once it is spent. Pure, like decide (decide.py is the one entry
point; these are its verbs for an attempt's end).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tpujob.reconcile.actions import Action, Count, DeleteSlice, EndAttempt, Move, ResetCount, StopProgram
from tpujob.reconcile.observation import JobView
from tpujob.reconcile.policy import Policy
from tpujob.store.states import AttemptEnd, Counter, EndReason, State


@dataclass(frozen=True)
class Budget:
    """One way an attempt ends that the job may survive a number of times."""
    counter: Counter  # the JobView/Job field counting it
    limit: str  # the Policy field bounding it
    end: AttemptEnd  # the attempt's end reason
    spent: EndReason  # the job's, once the budget is spent
    stops_program: bool
    frees_slice: bool  # delete the slice at once; otherwise only once the job FAILED (unless kept)


BUDGETS = {b.counter: b for b in (
    Budget("preemptions", "max_preemptions", AttemptEnd.PREEMPTED, EndReason.PREEMPTION_BUDGET, False, True),
    Budget("capacity_misses", "max_capacity_retries", AttemptEnd.NO_CAPACITY, EndReason.NO_CAPACITY, False, True),
    Budget("nan_restarts", "max_nan", AttemptEnd.NAN, EndReason.NAN_BUDGET, True, True),
    # The program failed on a healthy slice: the next attempt may set it up again.
    Budget("failures", "max_failures", AttemptEnd.FAILED, EndReason.USER_ERROR, True, False),
    # A host's TPU held by another process: the slice itself is bad, never set up again.
    Budget("bad_hosts", "max_bad_hosts", AttemptEnd.BAD_HOST, EndReason.BAD_HOST_BUDGET, True, True),
    # A hang may be the hardware's (a host that stopped answering its peers): new slice.
    Budget("hangs", "max_hangs", AttemptEnd.HUNG, EndReason.HANG_BUDGET, True, True),
)}


def spend(job: JobView, policy: Policy, counter: Counter, *, spent_message: str, again_message: str,
          extra: tuple[Action, ...] = (), end: AttemptEnd | None = None,
          reason: EndReason | None = None, retry: bool = True) -> list[Action]:
    """End the attempt, free the slice, count, then FAILED (budget spent, or no retry) or
    RECOVERING. The count is applied with the Move, in its transaction."""
    budget = BUDGETS[counter]
    actions: list[Action] = [StopProgram(stacks=budget.end == AttemptEnd.HUNG)] if budget.stops_program else []
    actions.append(EndAttempt(end or budget.end))
    if budget.frees_slice:
        actions.append(DeleteSlice())
    actions += [Count(counter), *extra]
    if retry and getattr(job, counter) + 1 <= getattr(policy, budget.limit):
        return actions + [Move(State.RECOVERING, again_message)]
    actions.append(Move(State.FAILED, spent_message, reason or budget.spent))
    return actions if budget.frees_slice or job.keep_slice else actions + [DeleteSlice()]


def spend_preemption(job: JobView, policy: Policy, why: str) -> list[Action]:
    """The slice is gone or dead: end the attempt, free the quota, go again within budget, at
    once unless the attempt ran under min_run_seconds (a flap: the next one waits)."""
    ran = job.in_state_seconds if job.state == State.RUNNING else 0.0  # never ran: a flap too
    flap = ran < policy.min_run_seconds
    extra: tuple[Action, ...] = (Count("flaps"),) if flap else (ResetCount("flaps"),) if job.flaps else ()
    budget = f"{why}; preemption {job.preemptions + 1} of {policy.max_preemptions} allowed"
    if flap:
        wait = policy.backoff(replace(job, flaps=job.flaps + 1, last_end=AttemptEnd.PREEMPTED))
        again = (f"{budget}; ran {ran:.0f} s, under min_run_seconds ({policy.min_run_seconds:.0f}): "
                 f"flap {job.flaps + 1}, next attempt in {wait:.0f} s")
    else:
        again = f"{budget}, next attempt now"
    return spend(job, policy, "preemptions", extra=extra, again_message=again,
                 spent_message=f"{why}; preemption budget of {policy.max_preemptions} spent")


def spend_capacity_miss(job: JobView, policy: Policy, why: str) -> list[Action]:
    """A capacity miss: free what the attempt holds, then wait (growing backoff) and try the next
    placement, cycling back to the primary, until max_capacity_retries misses in a row."""
    misses = job.capacity_misses + 1
    wait = policy.backoff(replace(job, capacity_misses=misses, last_end=AttemptEnd.NO_CAPACITY))
    where = "the next placement" if job.placements > 1 else "the same placement"
    return spend(job, policy, "capacity_misses",
                 spent_message=f"{why}; {policy.max_capacity_retries} capacity retries spent",
                 again_message=f"{why}; capacity miss {misses} of {policy.max_capacity_retries} allowed, "
                               f"{where} in {wait:.0f} s")


def spend_failure(job: JobView, policy: Policy, attempt_reason: AttemptEnd, why: str, reason: EndReason,
                  retry: bool = True) -> list[Action]:
    """The program failed (or its setup did): a retry within max_failures, unless `retry` is
    False (a code or config error no rerun fixes)."""
    return spend(job, policy, "failures", end=attempt_reason, reason=reason, retry=retry, spent_message=why,
                 again_message=f"{why}; retry {job.failures + 1} of {policy.max_failures}")


def spend_bad_host(job: JobView, policy: Policy, index: int, line: str) -> list[Action]:
    """A known bad-host line in the program's log: the slice goes (never retried on it) and a new
    one comes at once, counted in its own budget, not the program's failures."""
    why = f"bad host {index}: {line}"
    return spend(job, policy, "bad_hosts",
                 spent_message=f"{why}; bad-host budget of {policy.max_bad_hosts} spent",
                 again_message=f"{why}; bad host {job.bad_hosts + 1} of {policy.max_bad_hosts} allowed, "
                               "replacing the slice")
