"""decide() as a table: (state, observation, policy) -> actions. Every legal move it makes is
checked against the transition table, and every row of the table that a sweep drives is reached."""

from dataclasses import replace

import pytest

from tpujob.reconcile.actions import (
    ClearUnhealthy,
    Count,
    CreateSlice,
    DeleteSlice,
    EndAttempt,
    MarkUnhealthy,
    Move,
    ResetCount,
    SetUp,
    StartAttempt,
    StopProgram,
)
from tpujob.reconcile.decide import Policy, decide
from tpujob.reconcile.observation import HostObservation, JobView, Observation, Program, SliceCondition
from tpujob.store.states import TRANSITIONS, EndReason, State

P = Policy(max_preemptions=2, max_failures=1, max_nan=1, backoff_seconds=10, max_capacity_retries=3)
RUN = HostObservation(Program.RUNNING)
OK = HostObservation(Program.EXITED, 0)
BAD = HostObservation(Program.EXITED, 3)
NAN = HostObservation(Program.EXITED, P.nan_exit_code)
SIGTERMED = HostObservation(Program.EXITED, P.preempted_exit_code)
GONE = HostObservation(Program.UNREACHABLE)


def job(state, **kw):
    base = dict(attempt=1, preemptions=0, failures=0, nan_restarts=0, hosts=2, in_state_seconds=5.0)
    base.update(kw)
    return JobView(state=state, **base)


def obs(phase, *hosts):
    return Observation(slice=phase, hosts=tuple(hosts))


CASES = [
    # id, job, observation, expected actions
    ("pending starts", job(State.PENDING, attempt=0), obs(SliceCondition.GONE), [StartAttempt()]),
    ("provisioning waits", job(State.PROVISIONING), obs(SliceCondition.QUEUED), []),
    ("provisioning creating", job(State.PROVISIONING), obs(SliceCondition.PROVISIONING), []),
    ("ready -> setting up", job(State.PROVISIONING), obs(SliceCondition.READY),
     [Move(State.SETTING_UP, "slice READY"), SetUp()]),
    ("absent slice re-created", job(State.PROVISIONING), obs(SliceCondition.GONE), [CreateSlice()]),
    # A slice lost before its program ran is a flap: the next attempt waits the backoff.
    ("lost while provisioning", job(State.PROVISIONING), obs(SliceCondition.LOST),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"), Count("flaps"),
      Move(State.RECOVERING, "slice lost while provisioning; preemption 1 of 2 allowed; ran 0 s, under "
                             "min_run_seconds (600): flap 1, next attempt in 12 s")]),
    # Capacity misses: wait (10 s base, doubling per miss in a row, plus the job's jitter), then the
    # next placement; FAILED no_capacity only past max_capacity_retries (3) misses in a row.
    ("stockout with fallback", job(State.PROVISIONING, placements=2), obs(SliceCondition.STOCKOUT),
     [EndAttempt("no_capacity"), DeleteSlice(), Count("capacity_misses"),
      Move(State.RECOVERING, "zone stocked out; capacity miss 1 of 3 allowed, the next placement in 12 s")]),
    ("stockout without fallback retries the same placement", job(State.PROVISIONING), obs(SliceCondition.STOCKOUT),
     [EndAttempt("no_capacity"), DeleteSlice(), Count("capacity_misses"),
      Move(State.RECOVERING, "zone stocked out; capacity miss 1 of 3 allowed, the same placement in 12 s")]),
    ("third stockout in a row waits longer", job(State.PROVISIONING, placements=2, capacity_misses=2),
     obs(SliceCondition.STOCKOUT),
     [EndAttempt("no_capacity"), DeleteSlice(), Count("capacity_misses"),
      Move(State.RECOVERING, "zone stocked out; capacity miss 3 of 3 allowed, the next placement in 47 s")]),
    ("stockout past the capacity budget fails", job(State.PROVISIONING, placements=2, capacity_misses=3),
     obs(SliceCondition.STOCKOUT),
     [EndAttempt("no_capacity"), DeleteSlice(), Count("capacity_misses"),
      Move(State.FAILED, "zone stocked out; 3 capacity retries spent", EndReason.NO_CAPACITY)]),
    ("queue timeout without fallback keeps its place", job(State.PROVISIONING, in_state_seconds=1e6),
     obs(SliceCondition.QUEUED), []),
    ("queue timeout with a fallback moves on", job(State.PROVISIONING, in_state_seconds=7 * 3600, placements=3),
     obs(SliceCondition.QUEUED),
     [EndAttempt("no_capacity"), DeleteSlice(), Count("capacity_misses"),
      Move(State.RECOVERING, "queued for 7.0 h without capacity; capacity miss 1 of 3 allowed, "
                             "the next placement in 12 s")]),
    # Provisioning is timed from the node's createTime: hours in the queue do not count.
    ("capacity after a long queue is not stuck", job(State.PROVISIONING, in_state_seconds=2 * 3600),
     Observation(SliceCondition.PROVISIONING, provisioning_seconds=60), []),
    ("queued resource provisioning, node not there yet", job(State.PROVISIONING, in_state_seconds=1e6),
     Observation(SliceCondition.PROVISIONING), []),
    ("node stuck provisioning", job(State.PROVISIONING, in_state_seconds=2 * 3600),
     Observation(SliceCondition.PROVISIONING, provisioning_seconds=31 * 60),
     [EndAttempt("no_capacity"), DeleteSlice(), Count("capacity_misses"),
      Move(State.RECOVERING, "slice stuck provisioning for 31 min; capacity miss 1 of 3 allowed, "
                             "the same placement in 12 s")]),
    ("ready after capacity misses clears them", job(State.PROVISIONING, capacity_misses=2), obs(SliceCondition.READY),
     [ResetCount("capacity_misses"), Move(State.SETTING_UP, "slice READY"), SetUp()]),
    # A create refused for good ends the job, not loops on it.
    ("create refused: user error", job(State.PROVISIONING),
     Observation(SliceCondition.REFUSED, refusal="InvalidArgument: bad accelerator"),
     [EndAttempt("refused"), DeleteSlice(),
      Move(State.FAILED, "the cloud refused the slice: InvalidArgument: bad accelerator", EndReason.USER_ERROR)]),
    ("create refused: quota", job(State.PROVISIONING),
     Observation(SliceCondition.NO_QUOTA, refusal="Quota limit 'X' has been exceeded"),
     [EndAttempt("refused"), DeleteSlice(),
      Move(State.FAILED, "quota exhausted: Quota limit 'X' has been exceeded", EndReason.NO_CAPACITY)]),
    # A zone that does not offer the accelerator: the next placement at once (not a capacity
    # miss, no backoff), passing over those already refused; none left: the spec is wrong.
    ("zone does not offer it, fallback left", job(State.PROVISIONING, placements=3, blocked_placements=frozenset({1})),
     Observation(SliceCondition.UNAVAILABLE, refusal="BadRequest: not found in zone"),
     [EndAttempt("unavailable"), Move(State.RECOVERING, "this placement is refused: BadRequest: "
                                                          "not found in zone; trying the next placement"),
      StartAttempt(next_placement=True)]),
    ("zone does not offer it, no placement left", job(State.PROVISIONING, placements=2, placement=1,
                                                      blocked_placements=frozenset({0})),
     Observation(SliceCondition.UNAVAILABLE, refusal="BadRequest: not found in zone"),
     [EndAttempt("unavailable"), Move(State.FAILED, "this placement is refused: BadRequest: "
                                                     "not found in zone", EndReason.USER_ERROR)]),
    # A regional quota of 0: a placement in another region, not the same region's other zones.
    ("quota spent, a fallback in another region", job(State.PROVISIONING, placements=3,
                                                      regions=("us-east5", "us-east5", "us-central1")),
     Observation(SliceCondition.NO_QUOTA, refusal="Limit: 0 in region us-east5"),
     [EndAttempt("no_quota"), Move(State.RECOVERING, "quota exhausted: Limit: 0 in region us-east5; trying a "
                                                      "placement in another region"),
      StartAttempt(next_placement=True)]),
    ("quota spent, fallbacks only in the same region", job(State.PROVISIONING, placements=2,
                                                           regions=("us-east5", "us-east5")),
     Observation(SliceCondition.NO_QUOTA, refusal="Limit: 0 in region us-east5"),
     [EndAttempt("refused"), DeleteSlice(),
      Move(State.FAILED, "quota exhausted: Limit: 0 in region us-east5", EndReason.NO_CAPACITY)]),
    ("setting up runs setup", job(State.SETTING_UP), obs(SliceCondition.READY), [SetUp()]),
    ("setup timeout, retry", job(State.SETTING_UP, in_state_seconds=1e6), obs(SliceCondition.READY),
     [StopProgram(), EndAttempt("setup_failed"), Count("failures"),
      Move(State.RECOVERING, "setup still running after 16667 min; retry 1 of 1")]),
    ("setup timeout, budget spent", job(State.SETTING_UP, in_state_seconds=1e6, failures=1), obs(SliceCondition.READY),
     [StopProgram(), EndAttempt("setup_failed"), Count("failures"),
      Move(State.FAILED, "setup still running after 16667 min", EndReason.SETUP_FAILED), DeleteSlice()]),
    # A VM stopping before its program ran has nothing to save: lost at once.
    ("VM stopping while provisioning", job(State.PROVISIONING, preemptions=2), obs(SliceCondition.STOPPING),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"), Count("flaps"),
      Move(State.FAILED, "slice lost while provisioning; preemption budget of 2 spent", EndReason.PREEMPTION_BUDGET)]),
    ("VM stopping during setup", job(State.SETTING_UP, preemptions=2), obs(SliceCondition.STOPPING),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"), Count("flaps"),
      Move(State.FAILED, "slice lost during setup; preemption budget of 2 spent", EndReason.PREEMPTION_BUDGET)]),
    ("lost during setup", job(State.SETTING_UP, preemptions=2), obs(SliceCondition.LOST),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"), Count("flaps"),
      Move(State.FAILED, "slice lost during setup; preemption budget of 2 spent", EndReason.PREEMPTION_BUDGET)]),
    # act marks the job unhealthy when setup cannot reach a host: a host that died there.
    ("setup: a host unreachable within grace", job(State.SETTING_UP, unhealthy_seconds=30), obs(SliceCondition.READY),
     [SetUp()]),
    ("setup: a host unreachable past grace", job(State.SETTING_UP, unhealthy_seconds=600), obs(SliceCondition.READY),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"), Count("flaps"),
      Move(State.RECOVERING, "hosts unreachable during setup for 600 s; preemption 1 of 2 allowed; ran 0 s, "
                             "under min_run_seconds (600): flap 1, next attempt in 12 s")]),
    ("running healthy", job(State.RUNNING), obs(SliceCondition.READY, RUN, RUN), []),
    ("running, one host done", job(State.RUNNING), obs(SliceCondition.READY, OK, RUN), []),
    ("succeeded", job(State.RUNNING), obs(SliceCondition.READY, OK, OK),
     [EndAttempt("succeeded"), DeleteSlice(), Move(State.SUCCEEDED, "program exited 0 on every host")]),
    ("succeeded, slice kept", job(State.RUNNING, keep_slice=True), obs(SliceCondition.READY, OK, OK),
     [EndAttempt("succeeded"), Move(State.SUCCEEDED, "program exited 0 on every host")]),
    # A sweep ended the attempt and stopped before the move (after or before the delete): the
    # next finishes it, whatever the slice reads now; never a preemption, never a re-run.
    ("succeeded, the move left undone", job(State.RUNNING, last_end="succeeded"), obs(SliceCondition.GONE),
     [DeleteSlice(),
      Move(State.SUCCEEDED, "the run succeeded (a sweep ended its attempt, then stopped before the move)")]),
    ("failure retried", job(State.RUNNING), obs(SliceCondition.READY, BAD, RUN),
     [StopProgram(), EndAttempt("failed"), Count("failures"),
      Move(State.RECOVERING, "program exited 3; retry 1 of 1")]),
    ("failure, budget spent", job(State.RUNNING, failures=1), obs(SliceCondition.READY, BAD, OK),
     [StopProgram(), EndAttempt("failed"), Count("failures"),
      Move(State.FAILED, "program exited 3", EndReason.USER_ERROR), DeleteSlice()]),
    # The runtime's init check, config error and strict recompile (77-79): never retried, even
    # with retries left, since the same code and config fail the same way on any hardware.
    ("config error not retried", job(State.RUNNING),
     obs(SliceCondition.READY, HostObservation(Program.EXITED, 78), RUN),
     [StopProgram(), EndAttempt("failed"), Count("failures"),
      Move(State.FAILED, "program exited 78: a code or config error, not retried", EndReason.USER_ERROR),
      DeleteSlice()]),
    ("init check refusal beside a plain failure", job(State.RUNNING),
     obs(SliceCondition.READY, BAD, HostObservation(Program.EXITED, 77)),
     [StopProgram(), EndAttempt("failed"), Count("failures"),
      Move(State.FAILED, "program exited 77: a code or config error, not retried", EndReason.USER_ERROR),
      DeleteSlice()]),
    ("nan -> new hardware", job(State.RUNNING), obs(SliceCondition.READY, NAN, RUN),
     [StopProgram(), EndAttempt("nan"), DeleteSlice(), Count("nan_restarts"),
      Move(State.RECOVERING, "NaN loss: slice suspect, moving to new hardware")]),
    ("nan budget spent", job(State.RUNNING, nan_restarts=1), obs(SliceCondition.READY, NAN, NAN),
     [StopProgram(), EndAttempt("nan"), DeleteSlice(), Count("nan_restarts"),
      Move(State.FAILED, "NaN loss; NaN budget of 1 spent", EndReason.NAN_BUDGET)]),
    # Preempted after running an hour (over min_run_seconds): no backoff, the next attempt now.
    ("preempted while running", job(State.RUNNING, in_state_seconds=3600), obs(SliceCondition.LOST),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"),
      Move(State.RECOVERING, "slice preempted; preemption 1 of 2 allowed, next attempt now")]),
    # A flex-start slice gone past its max_run_duration: Google deleted it then; no preemption spent.
    ("flex-start gone at its max_run_duration", job(State.RUNNING, in_state_seconds=3600, run_limit_reached=True),
     obs(SliceCondition.GONE),
     [EndAttempt("preempted"), DeleteSlice(),
      Move(State.RECOVERING, "slice gone at its max_run_duration (flex-start VMs are deleted then): not a "
                             "preemption, next attempt now")]),
    ("a slice gone before its max_run_duration is spent as before", job(State.RUNNING, in_state_seconds=3600),
     obs(SliceCondition.GONE),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"),
      Move(State.RECOVERING, "slice gone; preemption 1 of 2 allowed, next attempt now")]),
    # A Compute Engine VM stopped with no preemption recorded: lost, and not called preempted.
    ("stopped, not preempted, while running", job(State.RUNNING, in_state_seconds=3600),
     replace(obs(SliceCondition.LOST), lost_why="TERMINATED, not preempted"),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"),
      Move(State.RECOVERING, "slice lost, not preempted (TERMINATED, not preempted); preemption 1 of 2 allowed, "
                             "next attempt now")]),
    ("sigterm exit counts as preemption", job(State.RUNNING, in_state_seconds=3600),
     obs(SliceCondition.READY, SIGTERMED, RUN),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"),
      Move(State.RECOVERING, "program stopped on a preemption notice; preemption 1 of 2 allowed, next attempt now")]),
    # Google's maintenance (Node.health, Node.upcomingMaintenance): a checkpoint request, then a new
    # slice, counted as a preemption; a window later than the next sweep waits for that sweep.
    ("maintenance health: checkpoint and replace", job(State.RUNNING, in_state_seconds=3600),
     replace(obs(SliceCondition.READY, RUN, RUN), health="UNHEALTHY_MAINTENANCE", health_detail="rescheduling"),
     [StopProgram(), EndAttempt("preempted"), DeleteSlice(), Count("preemptions"),
      Move(State.RECOVERING, "slice under maintenance (health UNHEALTHY_MAINTENANCE: rescheduling): checkpoint "
                             "requested, slice replaced; preemption 1 of 2 allowed, next attempt now")]),
    ("maintenance window within the sweep interval", job(State.RUNNING, in_state_seconds=3600),
     replace(obs(SliceCondition.READY, RUN, RUN), health="HEALTHY", maintenance_in_seconds=120,
             maintenance_type="SCHEDULED"),
     [StopProgram(), EndAttempt("preempted"), DeleteSlice(), Count("preemptions"),
      Move(State.RECOVERING, "scheduled maintenance window opens in 120 s: checkpoint requested, slice "
                             "replaced; preemption 1 of 2 allowed, next attempt now")]),
    # The lab's scheduler evicts it for a higher band (reconcile/admission.py): the checkpoint
    # signal and its grace, the slice freed, QUEUED again; no preemption or failure counted.
    ("evicted for a higher band", job(State.RUNNING, in_state_seconds=3600, evict="its chips go to job 7"),
     obs(SliceCondition.READY, RUN, RUN),
     [StopProgram(), EndAttempt("evicted"), Count("evictions"), DeleteSlice(),
      Move(State.QUEUED, "evicted: its chips go to job 7")]),
    ("a queued job is left to admission", job(State.QUEUED, attempt=0), obs(SliceCondition.GONE), []),
    # A cost cap reached (reconcile/spending.py): the checkpoint signal, the slice freed, FAILED.
    ("budget reached while running", job(State.RUNNING, over_budget="max_cost reached: $4.00 of $4.00"),
     obs(SliceCondition.READY, RUN, RUN),
     [StopProgram(), EndAttempt("budget"), DeleteSlice(),
      Move(State.FAILED, "max_cost reached: $4.00 of $4.00", EndReason.BUDGET)]),
    ("budget reached, slice kept", job(State.RUNNING, over_budget="over", keep_slice=True),
     obs(SliceCondition.READY, RUN, RUN), [StopProgram(), EndAttempt("budget"), Move(State.FAILED, "over",
                                                                                    EndReason.BUDGET)]),
    ("budget reached between attempts", job(State.RECOVERING, over_budget="over"), obs(SliceCondition.GONE),
     [Move(State.FAILED, "over", EndReason.BUDGET)]),
    ("a run that succeeded as its budget ran out succeeded", job(State.RUNNING, over_budget="over"),
     obs(SliceCondition.READY, OK, OK),
     [EndAttempt("succeeded"), DeleteSlice(), Move(State.SUCCEEDED, "program exited 0 on every host")]),
    ("maintenance window past the next sweep waits", job(State.RUNNING, in_state_seconds=3600),
     replace(obs(SliceCondition.READY, RUN, RUN), health="HEALTHY",
             maintenance_in_seconds=P.maintenance_lead_seconds + 1, maintenance_type="SCHEDULED"), []),
    ("maintenance after success changes nothing", job(State.RUNNING, in_state_seconds=3600),
     replace(obs(SliceCondition.READY, OK, OK), maintenance_in_seconds=0, maintenance_type="UNSCHEDULED"),
     [EndAttempt("succeeded"), DeleteSlice(), Move(State.SUCCEEDED, "program exited 0 on every host")]),
    ("maintenance during setup replaces the slice", job(State.SETTING_UP),
     replace(obs(SliceCondition.READY), maintenance_in_seconds=-5, maintenance_type="UNSCHEDULED"),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"), Count("flaps"),
      Move(State.RECOVERING, "unscheduled maintenance window is open: slice replaced before the program starts; "
                             "preemption 1 of 2 allowed; ran 0 s, under min_run_seconds (600): flap 1, next "
                             "attempt in 12 s")]),
    ("host blip: mark, don't act", job(State.RUNNING), obs(SliceCondition.READY, GONE, RUN),
     [MarkUnhealthy("host 0 did not answer")]),
    ("host blip within grace", job(State.RUNNING, unhealthy_seconds=30), obs(SliceCondition.READY, GONE, RUN), []),
    ("host lost past grace", job(State.RUNNING, unhealthy_seconds=600, in_state_seconds=3600),
     obs(SliceCondition.READY, GONE, RUN),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"),
      Move(State.RECOVERING, "hosts unreachable or program missing for 600 s; preemption 1 of 2 allowed, "
                             "next attempt now")]),
    ("recovered from blip", job(State.RUNNING, unhealthy_seconds=30), obs(SliceCondition.READY, RUN, RUN),
     [ClearUnhealthy()]),
    ("recovering backs off", job(State.RECOVERING, in_state_seconds=1), obs(SliceCondition.GONE), []),
    ("recovering starts a new attempt", job(State.RECOVERING, in_state_seconds=60), obs(SliceCondition.GONE),
     [StartAttempt()]),
    ("recovering deletes a leftover slice first", job(State.RECOVERING, in_state_seconds=60), obs(SliceCondition.LOST),
     [DeleteSlice(), StartAttempt()]),
    ("recovering after a capacity miss tries the next placement",
     job(State.RECOVERING, in_state_seconds=13, capacity_misses=1, placements=2), obs(SliceCondition.GONE),
     [StartAttempt(next_placement=True)]),
    ("recovering after a capacity miss, one placement", job(State.RECOVERING, in_state_seconds=13, capacity_misses=1),
     obs(SliceCondition.GONE), [StartAttempt()]),
    ("recovering backs off longer after misses in a row",
     job(State.RECOVERING, in_state_seconds=40, capacity_misses=3, placements=2), obs(SliceCondition.GONE), []),
    ("recovering after misses in a row, wait over",
     job(State.RECOVERING, in_state_seconds=48, capacity_misses=3, placements=2), obs(SliceCondition.GONE),
     [StartAttempt(next_placement=True)]),
    # After a preemption: no backoff, unless the attempt flapped (doubling per flap in a row).
    ("recovering after a preemption starts at once",
     job(State.RECOVERING, in_state_seconds=0, last_end="preempted"), obs(SliceCondition.GONE), [StartAttempt()]),
    ("recovering after a preemption, even after capacity misses before it",
     job(State.RECOVERING, in_state_seconds=0, last_end="preempted", capacity_misses=2), obs(SliceCondition.GONE),
     [StartAttempt()]),
    ("recovering after a flap waits the backoff",
     job(State.RECOVERING, in_state_seconds=11, last_end="preempted", flaps=1), obs(SliceCondition.GONE), []),
    ("recovering after a flap, wait over",
     job(State.RECOVERING, in_state_seconds=13, last_end="preempted", flaps=1), obs(SliceCondition.GONE),
     [StartAttempt()]),
    ("recovering after three flaps in a row waits four times as long",
     job(State.RECOVERING, in_state_seconds=40, last_end="preempted", flaps=3), obs(SliceCondition.GONE), []),
    ("recovering after a failure still backs off",
     job(State.RECOVERING, in_state_seconds=1, last_end="failed"), obs(SliceCondition.GONE), []),
    ("recovering reuses a healthy slice after a failure", job(State.RECOVERING, in_state_seconds=60, reuse_slice=True),
     obs(SliceCondition.READY), [StartAttempt(reuse_slice=True), SetUp()]),
    # act reports the launch; the move to RUNNING is decide's, like every move.
    ("the program just launched", job(State.SETTING_UP), Observation(SliceCondition.READY, launched=2),
     [Move(State.RUNNING, "program launched on 2 hosts")]),
    ("setup script failed", job(State.SETTING_UP), Observation(SliceCondition.READY, setup_error="host 1: exit 2"),
     [StopProgram(), EndAttempt("setup_failed"), Count("failures"),
      Move(State.RECOVERING, "setup failed: host 1: exit 2; retry 1 of 1")]),
]


@pytest.mark.parametrize("name,view,observation,expected", CASES, ids=[c[0] for c in CASES])
def test_decide(name, view, observation, expected):
    assert decide(view, observation, P) == expected


@pytest.mark.parametrize("state", [State.SUCCEEDED, State.FAILED, State.CANCELLED, State.DELETED])
def test_ended_jobs_are_never_touched(state):
    for phase in SliceCondition:
        assert decide(job(state), obs(phase, OK, BAD), P) == []


def test_backoff_doubles_per_capacity_miss_up_to_a_cap_with_bounded_jitter():
    policy = Policy(max_preemptions=1, max_failures=1, max_nan=1, backoff_seconds=30)
    waits = [policy.backoff(job(State.RECOVERING, capacity_misses=n)) for n in range(0, 12)]
    base = [30, 30, 60, 120, 240, 480, 960, 1800, 1800, 1800, 1800, 1800]
    for wait, floor in zip(waits, base):
        assert floor <= wait < floor * 1.2
    # Deterministic (decide is pure), yet spread across jobs and attempts.
    again = policy.backoff(job(State.RECOVERING, capacity_misses=3))
    assert again == waits[3]
    spread = {round(policy.backoff(job(State.RECOVERING, job_id=i, attempt=2)), 6) for i in range(20)}
    assert len(spread) == 20
    assert Policy(max_preemptions=1, max_failures=1, max_nan=1, backoff_seconds=0).backoff(
        job(State.RECOVERING, capacity_misses=5)) == 0  # tests and impatient users: no wait at all


def test_every_move_is_legal_and_every_swept_transition_is_reached():
    reached = set()
    for _, view, _observation, expected in CASES:
        state = view.state
        for action in expected:
            if isinstance(action, Move):
                assert action.to in TRANSITIONS[state], (state, action.to)
                reached.add((state, action.to))
                state = action.to
            elif isinstance(action, StartAttempt):  # act opens the attempt and moves on
                state_to = State.SETTING_UP if action.reuse_slice else State.PROVISIONING
                reached.add((state, state_to))
                state = state_to
            elif isinstance(action, SetUp):
                reached.add((state, State.RUNNING))  # act launches, then moves to RUNNING
    # Moves made by users (cancel, delete, resume) are covered by the store and CLI tests.
    user_moves = {(s, d) for s, dsts in TRANSITIONS.items() for d in dsts
                  if d in (State.CANCELLED, State.DELETED) or s in (State.FAILED, State.CANCELLED)}
    # Legal, but no sweep makes them: an attempt is always opened (PROVISIONING) before its create
    # can be refused, so a refusal fails the job from PROVISIONING (the "create refused" rows).
    act_moves = {(State.PENDING, State.FAILED), (State.RECOVERING, State.FAILED)}
    # Admission's compare-and-set moves (Store.admit, tests/reconcile/test_admission.py); a
    # QUEUED job fails only by a user's hand (none yet: legal, as from PENDING).
    admitted = {(State.QUEUED, State.PENDING), (State.QUEUED, State.RECOVERING), (State.QUEUED, State.FAILED)}
    missing = ({(s, d) for s, dsts in TRANSITIONS.items() for d in dsts}
               - user_moves - act_moves - admitted - reached)
    assert missing == set()


# --- the run dir on GCS (status.json, heartbeat), read by the sweep without SSH ------------------

from tpujob.runtime.contract import RunDirStatus  # noqa: E402

DONE = RunDirStatus(state="succeeded", step=100, message="done")


def with_run(phase, *hosts, run):
    return Observation(slice=phase, hosts=tuple(hosts), run_dir=run)


RUN_DIR_CASES = [
    ("status succeeded, a host unreachable past grace: succeeded, never re-run",
     job(State.RUNNING, hosts=4, unhealthy_seconds=600), with_run(SliceCondition.READY, OK, OK, OK, GONE, run=DONE),
     [EndAttempt("succeeded"), DeleteSlice(), Move(State.SUCCEEDED, "status.json: succeeded at step 100")]),
    ("status succeeded, slice preempted since: succeeded", job(State.RUNNING, keep_slice=True),
     with_run(SliceCondition.LOST, run=DONE),
     [EndAttempt("succeeded"), Move(State.SUCCEEDED, "status.json: succeeded at step 100")]),
    ("status succeeded while a host still runs: wait for it", job(State.RUNNING),
     with_run(SliceCondition.READY, OK, RUN, run=DONE), []),
    ("status nan, hosts unreachable: new hardware", job(State.RUNNING),
     with_run(SliceCondition.READY, GONE, GONE, run=RunDirStatus(state="nan", step=7)),
     [StopProgram(), EndAttempt("nan"), DeleteSlice(), Count("nan_restarts"),
      Move(State.RECOVERING, "NaN loss: slice suspect, moving to new hardware")]),
    ("status preempted: a preemption", job(State.RUNNING, in_state_seconds=3600),
     with_run(SliceCondition.READY, RUN, GONE, run=RunDirStatus(state="preempted", step=7)),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"),
      Move(State.RECOVERING, "program stopped on a preemption notice; preemption 1 of 2 allowed, next attempt now")]),
    # A Compute Engine VM in its shutdown (a Spot VM's preemption notice): the program may be
    # writing its SIGTERM checkpoint, and a delete would cut it short. Nothing is done, hosts
    # answering or not, until it reads stopped (LOST), the program says it stopped, or it has
    # read STOPPING past any notice (180 s from the mark).
    ("VM stopping: marked, left alone", job(State.RUNNING),
     with_run(SliceCondition.STOPPING, GONE, GONE, run=RunDirStatus(heartbeat_age=900)),
     [MarkUnhealthy("VM stopping (a preemption notice): its program may be saving")]),
    ("VM stopping within the limit, hosts silent: left alone", job(State.RUNNING, unhealthy_seconds=170),
     with_run(SliceCondition.STOPPING, GONE, GONE, run=RunDirStatus(heartbeat_age=900)), []),
    ("VM stopping past the limit: lost", job(State.RUNNING, in_state_seconds=3600, unhealthy_seconds=600),
     with_run(SliceCondition.STOPPING, run=RunDirStatus(heartbeat_age=900)),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"),
      Move(State.RECOVERING, "VM still stopping 600 s after it was seen so; preemption 1 of 2 allowed, "
                             "next attempt now")]),
    ("VM stopping, the program said it stopped on the notice: a preemption", job(State.RUNNING, in_state_seconds=3600),
     with_run(SliceCondition.STOPPING, run=RunDirStatus(state="preempted", step=7)),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"),
      Move(State.RECOVERING, "program stopped on a preemption notice; preemption 1 of 2 allowed, next attempt now")]),
    ("VM stopped since: a preemption", job(State.RUNNING, in_state_seconds=3600),
     with_run(SliceCondition.LOST, run=RunDirStatus(heartbeat_age=30)),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"),
      Move(State.RECOVERING, "slice preempted; preemption 1 of 2 allowed, next attempt now")]),
    ("status failed: a failure, with its message", job(State.RUNNING),
     with_run(SliceCondition.READY, RUN, RUN, run=RunDirStatus(state="failed", message="bad data", exit_code=1)),
     [StopProgram(), EndAttempt("failed"), Count("failures"),
      Move(State.RECOVERING, "program exited 1 (status.json: bad data); retry 1 of 1")]),
    ("status failed while a host does not answer: the host first, not the failure budget", job(State.RUNNING),
     with_run(SliceCondition.READY, RUN, GONE, run=RunDirStatus(state="failed", message="bad data", exit_code=1)),
     [MarkUnhealthy("host 1 did not answer; a peer's program exited 1")]),
    ("fresh heartbeat: healthy", job(State.RUNNING),
     with_run(SliceCondition.READY, RUN, RUN, run=RunDirStatus(heartbeat_age=20)), []),
    ("stale heartbeat, a host unreachable: marked unhealthy, not a hang", job(State.RUNNING),
     with_run(SliceCondition.READY, RUN, GONE, run=RunDirStatus(heartbeat_age=900)),
     [MarkUnhealthy("host 1 did not answer; heartbeat 900 s old")]),
    ("stale heartbeat within grace: wait", job(State.RUNNING, unhealthy_seconds=30),
     with_run(SliceCondition.READY, RUN, OK, run=RunDirStatus(heartbeat_age=900)), []),
    ("stale heartbeat past grace, a host exited: new slice",
     job(State.RUNNING, unhealthy_seconds=200, in_state_seconds=3600),
     with_run(SliceCondition.READY, RUN, OK, run=RunDirStatus(heartbeat_age=900)),
     [EndAttempt("preempted"), DeleteSlice(), Count("preemptions"),
      Move(State.RECOVERING, "program hung: heartbeat 900 s old, unhealthy for 200 s; preemption 1 of 2 "
                             "allowed, next attempt now")]),
    ("heartbeat fresh again: cleared", job(State.RUNNING, unhealthy_seconds=30),
     with_run(SliceCondition.READY, RUN, RUN, run=RunDirStatus(heartbeat_age=5)), [ClearUnhealthy()]),
]


@pytest.mark.parametrize("name,view,observation,expected", RUN_DIR_CASES, ids=[c[0] for c in RUN_DIR_CASES])
def test_decide_reads_the_run_dir(name, view, observation, expected):
    assert decide(view, observation, P) == expected


# --- the flap rule: a preemption after a run shorter than min_run_seconds -----------------------

FLAPPY = Policy(max_preemptions=9, max_failures=1, max_nan=1, backoff_seconds=30, min_run_seconds=600)


def test_a_preemption_after_a_long_run_restarts_at_once_and_ends_a_run_of_flaps():
    actions = decide(job(State.RUNNING, in_state_seconds=601, flaps=3), obs(SliceCondition.LOST), FLAPPY)
    assert ResetCount("flaps") in actions and Count("flaps") not in actions
    assert actions[-1] == Move(State.RECOVERING, "slice preempted; preemption 1 of 9 allowed, next attempt now")
    # In RECOVERING after it (the counters as the Move wrote them): no wait at all.
    after = job(State.RECOVERING, in_state_seconds=0, flaps=0, last_end="preempted")
    assert FLAPPY.backoff(after) == 0
    assert decide(after, obs(SliceCondition.GONE), FLAPPY) == [StartAttempt()]


def test_a_preemption_after_a_short_run_is_a_flap_and_waits():
    actions = decide(job(State.RUNNING, in_state_seconds=599), obs(SliceCondition.LOST), FLAPPY)
    assert Count("flaps") in actions
    move = actions[-1]
    assert move.to == State.RECOVERING
    assert "ran 599 s, under min_run_seconds (600): flap 1, next attempt in 3" in move.message
    after = job(State.RECOVERING, in_state_seconds=0, flaps=1, last_end="preempted")
    assert 30 <= FLAPPY.backoff(after) < 36
    assert decide(after, obs(SliceCondition.GONE), FLAPPY) == []
    assert decide(replace(after, in_state_seconds=36), obs(SliceCondition.GONE), FLAPPY) == [StartAttempt()]


def test_flap_backoff_doubles_per_flap_in_a_row_up_to_the_cap():
    waits = [FLAPPY.backoff(job(State.RECOVERING, flaps=n, last_end="preempted")) for n in range(0, 10)]
    base = [0, 30, 60, 120, 240, 480, 960, 1800, 1800, 1800]
    for wait, floor in zip(waits, base):
        assert floor <= wait <= floor * 1.2
    # The message of the flap that starts the wait names that same wait.
    actions = decide(job(State.RUNNING, in_state_seconds=10, flaps=2), obs(SliceCondition.LOST), FLAPPY)
    third = FLAPPY.backoff(job(State.RECOVERING, flaps=3, last_end="preempted"))
    assert actions[-1].message.endswith(f"flap 3, next attempt in {third:.0f} s")


def test_min_run_seconds_zero_never_counts_a_flap():
    policy = replace(FLAPPY, min_run_seconds=0)
    actions = decide(job(State.RUNNING, in_state_seconds=0.5), obs(SliceCondition.LOST), policy)
    assert Count("flaps") not in actions and actions[-1].message.endswith("next attempt now")


# -- hangs: a program alive on every host that makes no progress -----------------------------

HP = replace(P, heartbeat_timeout_seconds=60, max_hangs=2, hang_seconds=120)
HUNG_STEPS = [StopProgram(stacks=True), EndAttempt("hung"), DeleteSlice(), Count("hangs")]


def running_for(*, progress=None, log=None, step=None):
    return HostObservation(Program.RUNNING, step=step, progress_age=progress, log_age=log)


HANG_CASES = [
    ("stale heartbeat, every host running: hung at once, stacks first, new slice", job(State.RUNNING),
     with_run(SliceCondition.READY, RUN, RUN, run=RunDirStatus(heartbeat_age=61)),
     HUNG_STEPS + [Move(State.RECOVERING, "program hung: heartbeat 61 s old (heartbeat_timeout_seconds 60); "
                                          "hang 1 of 2 allowed, stacks captured before the stop, new slice")]),
    ("heartbeat beats but its step is stuck (a peer frozen in a collective): hung", job(State.RUNNING),
     with_run(SliceCondition.READY, running_for(progress=90, step=40), running_for(progress=91, step=40),
              run=RunDirStatus(heartbeat_age=2)),
     HUNG_STEPS + [Move(State.RECOVERING, "program hung: no progress at step 40 for 90 s while the heartbeat "
                                          "beats on (heartbeat_timeout_seconds 60); hang 1 of 2 allowed, "
                                          "stacks captured before the stop, new slice")]),
    ("progress within the timeout: nothing", job(State.RUNNING),
     with_run(SliceCondition.READY, running_for(progress=59), running_for(progress=59),
              run=RunDirStatus(heartbeat_age=2)),
     []),
    ("a silent log past run.hang_seconds on every host: hung", job(State.RUNNING),
     with_run(SliceCondition.READY, running_for(log=130), running_for(log=121), run=None),
     HUNG_STEPS + [Move(State.RECOVERING, "program hung: no log output on any host for 121 s "
                                          "(run.hang_seconds 120); hang 1 of 2 allowed, stacks captured before "
                                          "the stop, new slice")]),
    ("one host still printing: not hung", job(State.RUNNING),
     with_run(SliceCondition.READY, running_for(log=500), running_for(log=3), run=None), []),
    ("a silent log without run.hang_seconds: never judged", job(State.RUNNING),
     with_run(SliceCondition.READY, running_for(log=10**6), running_for(log=10**6), run=None), "no hang_seconds"),
    ("hang budget spent: FAILED hang_budget, slice freed", job(State.RUNNING, hangs=2),
     with_run(SliceCondition.READY, RUN, RUN, run=RunDirStatus(heartbeat_age=61)),
     HUNG_STEPS + [Move(State.FAILED, "program hung: heartbeat 61 s old (heartbeat_timeout_seconds 60); hang "
                                      "budget of 2 spent", EndReason.HANG_BUDGET)]),
    ("a host exited non-zero while another hangs: a failure, not a hang", job(State.RUNNING),
     with_run(SliceCondition.READY, BAD, running_for(progress=900), run=None),
     [StopProgram(), EndAttempt("failed"), Count("failures"),
      Move(State.RECOVERING, "program exited 3; retry 1 of 1")]),
]


@pytest.mark.parametrize("name,view,observation,expected", HANG_CASES, ids=[c[0] for c in HANG_CASES])
def test_decide_judges_hangs(name, view, observation, expected):
    if expected == "no hang_seconds":
        assert decide(view, observation, replace(HP, hang_seconds=None)) == []
        return
    assert decide(view, observation, HP) == expected
