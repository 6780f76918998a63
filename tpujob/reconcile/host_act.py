"""act's hands on the hosts of an attempt's slice: start setup, launch the program once setup is
done on every host, stop it (its stacks first when it hung), and unmount what an ending attempt
mounted. Each handler takes (actor, turn, action), as act.Actor's table calls it; an elastic
job's stop on the slices left is in elastic_act.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpujob.cloud.base import Slice, SlicePhase
from tpujob.errors import HostsUnreachable, SetupFailed, SshAuthRefused, TpujobError
from tpujob.faults import crash_point
from tpujob.reconcile import elastic_act
from tpujob.reconcile.actions import Launch, SetUp, StopProgram
from tpujob.reconcile.attempt_slices import attempt_slice
from tpujob.reconcile.observation import Observation, Setup, SliceCondition, condition_of
from tpujob.reconcile.outcome import Outcome, done, retry_after, setup_failed, ssh_refused
from tpujob.spec.stored import spec_of
from tpujob.store.models import Attempt, Job

if TYPE_CHECKING:
    from tpujob.reconcile.act import Actor, Turn

# A hung program made no progress for heartbeat_timeout_seconds (or run.hang_seconds): it will
# not reach the step boundary where it would save, so the stop's usual grace, sized for a
# SIGTERM checkpoint, would only keep the new slice waiting (and a frozen host's process never
# sees the SIGTERM at all). Seconds enough for a handler to flush its logs.
HUNG_STOP_GRACE_SECONDS = 5


def set_up(actor: Actor, turn: Turn, action: SetUp) -> Outcome:
    job, attempt = turn.job, turn.current()
    slice_ = turn.slice or attempt_slice(actor.cloud, job, attempt)
    if slice_.hosts:
        # The address tpujob (and so the user) reaches host 0 on, as `list` shows it.
        external = spec_of(job).spec.tpu.network.external_ips
        actor.store.update(job.id, host0_ip=slice_.hosts[0].address(external))
    try:
        seen = actor.hosts.start_setup(job, attempt, slice_)
        crash_point("setup-started")
    except SetupFailed as exc:
        return setup_failed(str(exc), slice_)
    except SshAuthRefused as exc:
        return ssh_refused(str(exc), slice_)
    except TpujobError as exc:  # hosts not answering (yet): the next sweep tries again
        gone = _lost_under_setup(actor, job, attempt)
        if gone is None:
            return _retry_setup(actor, turn, exc)
        # e.g. a disk attach refused because the node was preempted: decide on that now.
        states = ", ".join(filter(None, (gone.node_state, gone.queued_resource_state))) or "gone"
        actor.store.add_event(job.id, "setup", f"setup stopped, the slice is {states}: {exc}")
        return done(Observation(slice=SliceCondition.LOST), gone)
    running = sum(1 for state in seen.hosts if state == Setup.RUNNING)
    if running and seen.error is None and seen.refused is None:  # say why nothing moves for a while
        actor.store.add_event(job.id, "setup", f"setup running on {running} of {len(seen.hosts)} hosts; "
                              "the program launches once it is done on every host")
    # What the hosts said as it started (running; done where it already was): decide waits
    # for it, or launches now.
    return done(Observation(slice=SliceCondition.READY, setup=seen.hosts, setup_error=seen.error,
                            ssh_refused=seen.refused, setup_cache=seen.cache), slice_)


def launch(actor: Actor, turn: Turn, action: Launch) -> Outcome:
    job, attempt = turn.job, turn.current()
    slice_ = turn.slice or attempt_slice(actor.cloud, job, attempt)
    actor.store.add_event(job.id, "setup", f"setup done on {len(slice_.hosts)} hosts"
                          + (f"; setup cache: {action.cache}" if action.cache else ""))
    try:
        actor.hosts.launch(job, attempt, slice_)
        crash_point("launched")
    except SetupFailed as exc:
        return setup_failed(str(exc), slice_)
    except SshAuthRefused as exc:
        return ssh_refused(str(exc), slice_)
    except TpujobError as exc:
        return _retry_setup(actor, turn, exc)
    return done(Observation(slice=SliceCondition.READY, launched=len(slice_.hosts)), slice_)


def _retry_setup(actor: Actor, turn: Turn, exc: TpujobError) -> Outcome:
    """Setup goes on at the next sweep. A host that cannot be reached marks the job
    unhealthy from the first such round (decide replaces the slice once that lasts past the
    unhealthy grace: a host that died in setup never answers again, however long setup may
    take); any other trouble clears the mark. One event per mark, not one per sweep. The one
    mark not asked for by decide: only this handler sees the setup step's unreachable hosts
    (decide still judges how long the mark lasts); Actor writes it, as for MarkUnhealthy."""
    job = turn.job
    unreachable = isinstance(exc, HostsUnreachable)
    if unreachable and job.unhealthy_since is None:
        actor.mark_unhealthy(job, "setup", f"setup will be retried: {exc}; the slice is "
                             "replaced if its hosts stay unreachable")
    elif not unreachable:
        if job.unhealthy_since is not None:
            actor.clear_unhealthy(job)
        actor.store.add_event(job.id, "setup", f"setup will be retried: {exc}")
    return retry_after(str(exc))


def _lost_under_setup(actor: Actor, job: Job, attempt: Attempt) -> Slice | None:
    """The slice, read again after a setup step failed, when it is gone or dead (preempted
    meanwhile); None when it still looks usable or cannot be read."""
    try:
        again = attempt_slice(actor.cloud, job, attempt)
    except TpujobError:
        return None
    lost = (SliceCondition.LOST, SliceCondition.ABSENT, SliceCondition.STOPPING)
    return again if condition_of(again.phase) in lost else None


def stop_program(actor: Actor, turn: Turn, action: StopProgram) -> Outcome:
    """The hosts' stop (HostOps.stop_program), as cancel and delete run it too (service/jobs.
    _stop_program); here a failed stop is an event and the sweep goes on, there it refuses."""
    if action.survivors:
        elastic_act.stop_survivors(actor, turn, action)
        return done()
    if turn.attempt is not None and turn.slice is not None and turn.slice.phase == SlicePhase.READY:
        if action.stacks:  # a hung program: where it stood, before it is gone
            try:
                actor.store.add_event(turn.job.id, "stacks",
                                      actor.hosts.capture_stacks(turn.job, turn.attempt, turn.slice))
            except TpujobError as exc:
                actor.store.add_event(turn.job.id, "stacks", f"stacks not captured: {exc}")
        try:
            if action.stacks:
                actor.hosts.stop_program(turn.job, turn.attempt, turn.slice, grace_seconds=HUNG_STOP_GRACE_SECONDS)
            else:
                actor.hosts.stop_program(turn.job, turn.attempt, turn.slice)
        except TpujobError as exc:
            actor.store.add_event(turn.job.id, "hosts", f"stop failed: {exc}")
    return done()


def unmount(actor: Actor, turn: Turn, attempt: Attempt) -> None:
    """An attempt ending on a slice that stays READY (kept, or reused by the next attempt)
    leaves none of its disk and bucket mounts behind."""
    if turn.slice is None or turn.slice.phase != SlicePhase.READY:
        return
    try:
        actor.hosts.unmount(turn.job, attempt, turn.slice)
    except TpujobError as exc:
        actor.store.add_event(turn.job.id, "hosts", f"unmount failed: {exc}")
