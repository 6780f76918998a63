"""decide, placement and observe on Google's answers that reach past one placement or are not
refusals at all (issue 22): a zonal quota blocks its zone, a regional one its region, a zone the
project may not use (LOCATION_POLICY_VIOLATED) every accelerator there; a queued resource that
ended FAILED is decided on by its failedData.error (and deleted: it holds quota), never counted
as a preemption while the job is provisioning."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tpujob.cloud.base import Slice, SlicePhase
from tpujob.errors import (
    CloudRefused,
    LocationDenied,
    PermissionDenied,
    QuotaExceeded,
    ReservationUnavailable,
    SlicePreempted,
    StockoutError,
)
from tpujob.reconcile.actions import Count, DeleteSlice, EndAttempt, Move, StartAttempt
from tpujob.reconcile.decide import Policy, decide
from tpujob.reconcile.observation import JobView, Observation, SliceCondition
from tpujob.reconcile.observe import Observer, refusal_of
from tpujob.reconcile.placement import blocked
from tpujob.store.states import EndReason, State

P = Policy(max_preemptions=2, max_failures=1, max_nan=1, backoff_seconds=10, max_capacity_retries=3)
EAST_A, EAST_B, WEST = "us-east5-a", "us-east5-b", "us-west1-c"


def job(zones, placement=0, blocked_placements=frozenset(), **kw):
    base = dict(attempt=1, preemptions=0, failures=0, nan_restarts=0, hosts=1, in_state_seconds=5.0,
                placements=len(zones), placement=placement, zones=tuple(zones),
                regions=tuple(z.rsplit("-", 1)[0] for z in zones), blocked_placements=blocked_placements)
    base.update(kw)
    return JobView(state=State.PROVISIONING, **base)


ZONE_QUOTA = "Quota 'TPUV5sLitepodServingPerProjectPerZoneForTPUAPI' exhausted. Limit 4 in zone us-east5-a"
DENIED = "Permission denied on 'locations/us-east5-a' (or it may not exist)."

CASES = [
    ("zonal quota: the same region's other zone is tried", job([EAST_A, EAST_B, WEST]),
     Observation(SliceCondition.NO_QUOTA, refusal=ZONE_QUOTA, scope="zone"),
     [EndAttempt("no_zone_quota"), Move(State.RECOVERING, f"quota exhausted: {ZONE_QUOTA}; trying a placement "
                                                           "in another zone"), StartAttempt(next_placement=True)]),
    ("zonal quota: another accelerator in the same zone is no way out", job([EAST_A, EAST_A]),
     Observation(SliceCondition.NO_QUOTA, refusal=ZONE_QUOTA, scope="zone"),
     [EndAttempt("refused"), DeleteSlice(),
      Move(State.FAILED, f"quota exhausted: {ZONE_QUOTA}", EndReason.NO_CAPACITY)]),
    ("regional quota: the same region's other zone is passed over", job([EAST_A, EAST_B]),
     Observation(SliceCondition.NO_QUOTA, refusal="Limit: 0 in region us-east5", scope="region"),
     [EndAttempt("refused"), DeleteSlice(),
      Move(State.FAILED, "quota exhausted: Limit: 0 in region us-east5", EndReason.NO_CAPACITY)]),
    ("zone denied: the next zone", job([EAST_A, EAST_A, EAST_B]),
     Observation(SliceCondition.UNAVAILABLE, refusal=DENIED, scope="zone"),
     [EndAttempt("location_denied"), Move(State.RECOVERING, f"this placement is refused: {DENIED}; trying the "
                                                             "next placement"), StartAttempt(next_placement=True)]),
    ("zone denied, only that zone left: a config error naming it", job([EAST_A, EAST_A]),
     Observation(SliceCondition.UNAVAILABLE, refusal=DENIED, scope="zone"),
     [EndAttempt("location_denied"), Move(State.FAILED, f"this placement is refused: {DENIED}", EndReason.USER_ERROR)]),
    # A queued resource that ended FAILED still exists and holds quota: deleted before moving on.
    ("failed queued resource on a zonal quota", job([EAST_A, EAST_B]),
     Observation(SliceCondition.NO_QUOTA, refusal=ZONE_QUOTA, scope="zone", holds_slice=True),
     [EndAttempt("no_zone_quota"), DeleteSlice(), Move(State.RECOVERING, f"quota exhausted: {ZONE_QUOTA}; trying "
                                                                         "a placement in another zone"),
      StartAttempt(next_placement=True)]),
    ("failed queued resource, placement refused, none left", job([EAST_A]),
     Observation(SliceCondition.UNAVAILABLE, refusal="no reservation", holds_slice=True),
     [EndAttempt("unavailable"), DeleteSlice(), Move(State.FAILED, "this placement is refused: no reservation",
                                                     EndReason.USER_ERROR)]),
    ("failed queued resource for capacity: a capacity miss that says why", job([EAST_A, WEST]),
     Observation(SliceCondition.STOCKOUT, refusal="queued resource q FAILED: no capacity", holds_slice=True),
     [EndAttempt("no_capacity"), DeleteSlice(), Count("capacity_misses"),
      Move(State.RECOVERING, "queued resource failed: queued resource q FAILED: no capacity; capacity miss 1 of "
                             "3 allowed, the next placement in 12 s")]),
]


@pytest.mark.parametrize("name,view,observation,expected", CASES, ids=[c[0] for c in CASES])
def test_decide(name, view, observation, expected):
    assert decide(view, observation, P) == expected


def attempt(zone, accelerator, end):
    return SimpleNamespace(zone=zone, accelerator=accelerator, end_reason=end)


@pytest.mark.parametrize("end, blocked_indexes", [
    ("no_zone_quota", {0, 1}),  # the zone, every accelerator: not us-east5-b, not us-west1-c
    ("location_denied", {0, 1}),
    ("no_quota", {0, 1, 2}),  # the region
    ("unavailable", {0}),  # the (accelerator, zone) itself
])
def test_how_far_a_refusal_blocks(end, blocked_indexes):
    options = [("v5litepod-4", EAST_A), ("v5litepod-8", EAST_A), ("v5litepod-4", EAST_B), ("v5litepod-4", WEST)]
    assert blocked(options, [attempt(EAST_A, "v5litepod-4", end), attempt(EAST_B, "v5litepod-4", None)]) \
        == frozenset(blocked_indexes)


@pytest.mark.parametrize("exc, condition, scope", [
    (StockoutError("x"), SliceCondition.STOCKOUT, None),
    (QuotaExceeded("x", zone=EAST_A), SliceCondition.NO_QUOTA, "zone"),
    (QuotaExceeded("x", region="us-east5"), SliceCondition.NO_QUOTA, "region"),
    (QuotaExceeded("x", scope="zone"), SliceCondition.NO_QUOTA, "zone"),
    (LocationDenied("x", zone=EAST_A), SliceCondition.UNAVAILABLE, "zone"),
    (ReservationUnavailable("x"), SliceCondition.UNAVAILABLE, None),
    (SlicePreempted("x"), SliceCondition.LOST, None),
    (PermissionDenied("x"), SliceCondition.REFUSED, None),
    (CloudRefused("x"), SliceCondition.REFUSED, None),
])
def test_refusal_of(exc, condition, scope):
    assert refusal_of(exc) == (condition, scope)


def failed_queued_resource(failure):
    return Slice(name="q", zone=EAST_A, phase=SlicePhase.FAILED, queued_resource_state="FAILED",
                 detail=str(failure), failure=failure)


def observe(state: State, slice_: Slice) -> Observation:
    observer = Observer(store=None, cloud=None, hosts=None, clock=lambda: 0.0)
    return observer.observe(SimpleNamespace(id=1, state=state.value, state_since=0.0),
                            SimpleNamespace(number=1, growing=None), slice_)


def test_a_failed_queued_resource_is_decided_on_by_its_error_while_provisioning():
    seen = observe(State.PROVISIONING, failed_queued_resource(QuotaExceeded("q: Limit 4 in zone z", zone="z")))
    assert seen == Observation(SliceCondition.NO_QUOTA, refusal="q: Limit 4 in zone z", scope="zone", holds_slice=True)
    # A preemption under it, or a queued resource that fails once its job runs, is a loss as before.
    assert observe(State.PROVISIONING, failed_queued_resource(SlicePreempted("p"))).slice == SliceCondition.LOST
    assert observe(State.SETTING_UP, failed_queued_resource(StockoutError("s"))).slice == SliceCondition.LOST
