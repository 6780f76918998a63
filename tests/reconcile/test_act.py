"""act against an in-process emulator, hosts stubbed: each action's outcome, and that act never
moves a job by itself (what it learns goes back to decide, which makes the move)."""

from __future__ import annotations

from test_sweep import Hosts, add_job, cloud_for, spec

from tpujob.errors import SetupFailed, StockoutError
from tpujob.names import slice_name
from tpujob.reconcile.act import Actor
from tpujob.reconcile.actions import Launch, Move, SetUp, StartAttempt
from tpujob.reconcile.decide import decide
from tpujob.reconcile.observation import Setup, SliceCondition
from tpujob.reconcile.reconciler import Reconciler
from tpujob.store.states import State


class FailingSetup(Hosts):
    def start_setup(self, job, attempt, slice_):
        raise SetupFailed("setup exited 2 on host 0")


def leased(store, job):
    return store.acquire_lease(job.id, "me", 300)


def opened(store, actor, job):
    """The job's first attempt opened and its node asked for: act does not wait for the create
    (its operation is kept with the attempt); the node is READY at once on the emulator."""
    outcome = actor.act(leased(store, job), None, None, [StartAttempt()])
    assert outcome.kind == "done" and outcome.slice is None
    attempt = store.current_attempt(job.id)
    assert attempt.create_operation.startswith("projects/tpujob-sweep/locations/")
    assert any(e.message == f"requested {attempt.slice_name} (node)" for e in store.events(job.id))
    ready = actor.cloud.get_slice(job.project, attempt.zone, attempt.slice_name)
    assert ready.phase.value == "READY"
    return store.get(job.id), attempt, ready


def test_a_launch_is_reported_and_decide_makes_the_move_to_running(server, store):
    job = add_job(store, spec())
    actor = Actor(store, cloud_for(server), Hosts(), "me", ssh_keys=(), clock=lambda: 1000.0)
    job, attempt, ready = opened(store, actor, job)
    assert job.state == State.PROVISIONING.value
    outcome = actor.act(job, attempt, ready, [Move(State.SETTING_UP, "slice READY"), SetUp()])
    assert (outcome.kind, outcome.observed.setup) == ("done", (Setup.DONE,) * len(ready.hosts))
    rec = Reconciler(store, cloud_for(server), Hosts(), "me")
    job = store.get(job.id)
    assert decide(rec._view(job, attempt), outcome.observed, rec._policy(job)) == [Launch()]
    outcome = actor.act(job, attempt, ready, [Launch()])
    assert (outcome.kind, outcome.observed.launched) == ("done", len(ready.hosts))
    assert store.get(job.id).state == State.SETTING_UP.value  # launched, not moved by act
    job = store.get(job.id)
    assert decide(rec._view(job, attempt), outcome.observed, rec._policy(job)) == [
        Move(State.RUNNING, f"program launched on {len(ready.hosts)} hosts")]


def test_a_slice_asked_for_tells_the_hosts_side_to_prepare_its_setup(server, store):
    # The login is learnt while the slice comes (SshHostOps.prepare), not on the setup's path.
    job, hosts = add_job(store, spec()), Hosts()
    actor = Actor(store, cloud_for(server), hosts, "me", ssh_keys=(), clock=lambda: 1000.0)
    opened(store, actor, job)
    assert hosts.prepared == [job.id]


def test_a_failed_setup_is_an_outcome_not_a_move(server, store):
    job = add_job(store, spec())
    actor = Actor(store, cloud_for(server), FailingSetup(), "me", ssh_keys=(), clock=lambda: 1000.0)
    job, attempt, ready = opened(store, actor, job)
    outcome = actor.act(job, attempt, ready, [Move(State.SETTING_UP, "slice READY"), SetUp()])
    assert (outcome.kind, outcome.reason) == ("setup_failed", "setup exited 2 on host 0")
    assert (outcome.observed.slice, outcome.observed.setup_error) == (SliceCondition.READY, "setup exited 2 on host 0")
    assert store.get(job.id).state == State.SETTING_UP.value
    assert store.current_attempt(job.id).end_reason is None


def test_a_stockout_is_refused_and_the_attempt_stays_open_for_decide(server, store):
    from tpujob.cloud.tpu_api import GcpCloud

    class StockedOut(GcpCloud):
        def request_node(self, request):
            raise StockoutError("no v4-8 left in us-central2-b")

    job = add_job(store, spec())
    actor = Actor(store, cloud_for(server, StockedOut), Hosts(), "me", ssh_keys=(), clock=lambda: 1000.0)
    outcome = actor.act(leased(store, job), None, None, [StartAttempt()])
    assert (outcome.kind, outcome.observed.slice) == ("refused", SliceCondition.STOCKOUT)
    after = store.get(job.id)
    assert (after.state, after.capacity_misses) == (State.PROVISIONING.value, 0)
    assert store.current_attempt(job.id).end_reason is None



def test_a_create_that_ended_in_a_stockout_is_told_by_its_operation(server, store):
    """The node asked for is not listed (a stockout leaves none): the next CreateSlice reads
    the create's operation instead of asking again, and its error is the refusal decide sees."""
    from tpujob.reconcile.actions import CreateSlice

    server.emulator.world.stockout("us-central2-b", None, clear=False)
    job = add_job(store, spec())
    actor = Actor(store, cloud_for(server), Hosts(), "me", ssh_keys=(), clock=lambda: 1000.0)
    actor.act(leased(store, job), None, None, [StartAttempt()])
    job, attempt = store.get(job.id), store.current_attempt(job.id)
    operation = attempt.create_operation
    outcome = actor.act(job, attempt, None, [CreateSlice()])
    for _ in range(100):  # the emulator ends the create on its own thread
        if outcome.kind != "retry_after":
            break
        outcome = actor.act(job, attempt, None, [CreateSlice()])
    assert (outcome.kind, outcome.observed.slice) == ("refused", SliceCondition.STOCKOUT)
    assert "There is no more capacity in the zone" in outcome.reason
    assert store.current_attempt(job.id).create_operation == operation  # not asked for twice
    assert sum(e.message.startswith("requested ") for e in store.events(job.id)) == 1


def test_a_create_the_api_forgot_is_asked_for_again(server, store):
    from tpujob.reconcile.actions import CreateSlice

    job = add_job(store, spec())
    actor = Actor(store, cloud_for(server), Hosts(), "me", ssh_keys=(), clock=lambda: 1000.0)
    actor.act(leased(store, job), None, None, [StartAttempt()])
    job, attempt = store.get(job.id), store.current_attempt(job.id)
    actor.cloud.delete_slice(job.project, attempt.zone, attempt.slice_name)
    store.record_create_operation(job.id, attempt.number, attempt.create_operation + "-unknown")
    outcome = actor.act(job, store.current_attempt(job.id), None, [CreateSlice()])
    assert outcome.kind == "done"
    assert actor.cloud.get_slice(job.project, attempt.zone, attempt.slice_name).phase.value in ("READY", "PROVISIONING")
    assert store.current_attempt(job.id).create_operation != attempt.create_operation + "-unknown"


def test_a_node_created_then_gone_is_a_lost_slice(server, store):
    from tpujob.reconcile.actions import CreateSlice

    job = add_job(store, spec())
    actor = Actor(store, cloud_for(server), Hosts(), "me", ssh_keys=(), clock=lambda: 1000.0)
    job, attempt, _ = opened(store, actor, job)
    actor.cloud.delete_slice(job.project, attempt.zone, attempt.slice_name)
    outcome = actor.act(job, attempt, None, [CreateSlice()])
    assert outcome.observed.slice == SliceCondition.LOST
    assert any("was created, then went away" in e.message for e in store.events(job.id))


def test_a_listing_older_than_the_create_is_not_a_lost_slice(server, store):
    """Another sweep's listing, taken before this node was asked for, does not show it: its
    create ended well, and the node is there: decided on, never counted as lost."""
    from tpujob.reconcile.actions import CreateSlice

    job = add_job(store, spec())
    actor = Actor(store, cloud_for(server), Hosts(), "me", ssh_keys=(), clock=lambda: 1000.0)
    job, attempt, _ = opened(store, actor, job)
    outcome = actor.act(job, attempt, None, [CreateSlice()])
    assert (outcome.kind, outcome.observed.slice, outcome.slice.name) == ("done", SliceCondition.READY,
                                                                           attempt.slice_name)
    assert not any("went away" in e.message for e in store.events(job.id))
    assert sum(e.message.startswith("requested ") for e in store.events(job.id)) == 1


def test_a_new_attempt_on_the_same_slice_keeps_an_elastic_attempts_own_nodes(server, store):
    # An elastic attempt left on slice 0 of an earlier one (tpujob-000001-1-0) whose program
    # failed: the retry on the same slice runs on that node, not on a name derived from its own.
    job = add_job(store, spec())
    kept = ["tpujob-000001-1-0"]
    store.start_attempt(job.id, State.PENDING, State.PROVISIONING, "x", zone="us-central2-b", accelerator="v4-8",
                        queued=False, slices=1, nodes=kept)
    for src, dst in ((State.PROVISIONING, State.SETTING_UP), (State.SETTING_UP, State.RUNNING),
                     (State.RUNNING, State.RECOVERING)):
        store.transition(job.id, src, dst, "x")
    store.end_attempt(job.id, 1, "failed")
    actor = Actor(store, cloud_for(server), Hosts(), "me", ssh_keys=(), clock=lambda: 1000.0)
    job = leased(store, store.get(job.id))
    outcome = actor.act(job, store.current_attempt(job.id), None, [StartAttempt(reuse_slice=True)])
    assert outcome.kind == "done"
    again = store.current_attempt(job.id)
    first = slice_name(job.id, 1, store.store_tag)  # attempt 1's name, kept: the slice is reused
    assert (again.number, again.slice_name, again.nodes, again.slices) == (2, first, "tpujob-000001-1-0", 1)


class StopsKept(Hosts):
    """Hosts that keep each stop's grace, and stacks that say where they were kept."""

    def __init__(self):
        super().__init__()
        self.graces: list[float] = []

    def stop_program(self, job, attempt, slice_, grace_seconds=30):
        self.graces.append(grace_seconds)

    def capture_stacks(self, job, attempt, slice_):
        return "stacks of 1 of 1 hosts kept in stacks.txt"


def test_a_hung_programs_stop_has_a_short_grace_and_a_notice_stop_the_whole_one(server, store):
    # A hung program never reaches the step boundary where it would save: its stop's grace only
    # keeps the new slice waiting. A checkpoint request (maintenance, a lost slice) keeps it.
    from tpujob.hosts.program import STOP_GRACE_SECONDS
    from tpujob.reconcile.act import HUNG_STOP_GRACE_SECONDS
    from tpujob.reconcile.actions import StopProgram

    job, hosts = add_job(store, spec()), StopsKept()
    actor = Actor(store, cloud_for(server), hosts, "me", ssh_keys=(), clock=lambda: 1000.0)
    job, attempt, ready = opened(store, actor, job)
    assert actor.act(job, attempt, ready, [StopProgram(stacks=True)]).kind == "done"
    assert actor.act(job, attempt, ready, [StopProgram()]).kind == "done"
    assert hosts.graces == [HUNG_STOP_GRACE_SECONDS, STOP_GRACE_SECONDS] == [5, 30]
    assert [e.message for e in store.events(job.id) if e.kind == "stacks"] == [
        "stacks of 1 of 1 hosts kept in stacks.txt"]
