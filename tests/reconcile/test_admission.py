"""The lab's scheduler decided (reconcile/admission.py), as a table: waiting jobs, admitted jobs and
caps -> each waiting job's decision (admitted, or why it waits, and whom it evicts)."""

import math

import pytest

from tpujob.reconcile.admission import (
    HALF_LIFE_HOURS,
    Cap,
    Decision,
    Demand,
    Holder,
    Waiter,
    decayed_chip_hours,
    exceeded,
    order,
    plan,
)


def d(chips, family="v5e", region="us-west4", provisioning="spot"):
    return Demand(family, region, provisioning, chips)


def held(job_id, owner, chips, band="normal", running=None, **kw):
    return Holder(job_id, owner, band, d(chips, **kw), running_seconds=running)


def wait(job_id, owner, chips, band="normal", at=None, **kw):
    return Waiter(job_id, owner, band, d(chips, **kw), queued_at=float(job_id if at is None else at))


CAP64 = Cap("v5e", "us-west4", "", 64)
FULL = [held(1, "alice", 32), held(2, "bob", 32)]

CASES = [
    # id, waiters, holders, caps, expected decisions
    ("no cap: admitted", [wait(10, "carol", 256)], [], [], [Decision(10, True)]),
    ("within the cap", [wait(10, "carol", 32)], [held(1, "alice", 32)], [CAP64], [Decision(10, True)]),
    ("the issue's words", [wait(10, "carol", 8)], FULL, [CAP64],
     [Decision(10, False, "quota: 64/64 v5e chips in us-west4 held by alice 32, bob 32; 1st in band normal")]),
    ("another region's cap does not cover it", [wait(10, "carol", 8, region="us-east5")], FULL, [CAP64],
     [Decision(10, True)]),
    ("a spot cap does not cover on-demand",
     [wait(10, "carol", 8, provisioning="on-demand")], FULL, [Cap("v5e", "", "spot", 64)], [Decision(10, True)]),
    ("a cap of any region covers every region",
     [wait(10, "carol", 8, region="europe-west4")], FULL, [Cap("v5e", "", "", 64)],
     [Decision(10, False, "quota: 64/64 v5e chips held by alice 32, bob 32; 1st in band normal")]),
    ("two admitted in one plan count against each other",
     [wait(10, "carol", 32), wait(11, "dave", 32), wait(12, "erin", 8)], [], [CAP64],
     [Decision(10, True), Decision(11, True),
      Decision(12, False, "quota: 64/64 v5e chips in us-west4 held by carol 32, dave 32; 1st in band normal")]),
    # No backfill: the small job queued after the large one waits behind it.
    ("strict order under one cap", [wait(10, "carol", 64), wait(11, "dave", 8)], [held(1, "alice", 8)], [CAP64],
     [Decision(10, False, "quota: 8/64 v5e chips in us-west4 held by alice 8; 1st in band normal"),
      Decision(11, False, "quota: 8/64 v5e chips in us-west4 held by alice 8; 2nd in band normal")]),
    ("a high job goes first, whenever queued",
     [wait(10, "carol", 32, at=1), wait(11, "dave", 32, band="high", at=9)], [held(1, "alice", 32)], [CAP64],
     [Decision(11, True),
      Decision(10, False, "quota: 64/64 v5e chips in us-west4 held by alice 32, dave 32; 1st in band normal")]),
    # Eviction: the lowest band, the most recently started, each past the minimum run time.
    ("a high job evicts the newest low job", [wait(10, "carol", 32, band="high")],
     [held(1, "alice", 32, band="low", running=3600), held(2, "bob", 32, band="low", running=900)], [CAP64],
     [Decision(10, False, "quota: 64/64 v5e chips in us-west4 held by alice 32, bob 32; 1st in band high; "
                          "evicting 1 lower-band job(s)", evict=(2,))]),
    ("low before normal, then the newest", [wait(10, "carol", 48, band="high")],
     [held(1, "alice", 16, band="normal", running=900), held(2, "bob", 16, band="low", running=3600),
      held(3, "bob", 16, band="low", running=1200), held(4, "dave", 16, band="normal", running=7200)], [CAP64],
     [Decision(10, False, "quota: 64/64 v5e chips in us-west4 held by bob 32, alice 16, dave 16; 1st in band "
                          "high; evicting 3 lower-band job(s)", evict=(3, 2, 1))]),
    ("never a job under the minimum run time", [wait(10, "carol", 32, band="high")],
     [held(1, "alice", 32, band="low", running=599), held(2, "bob", 32, band="low", running=None)], [CAP64],
     [Decision(10, False, "quota: 64/64 v5e chips in us-west4 held by alice 32, bob 32; 1st in band high")]),
    ("never the same band", [wait(10, "carol", 32)],
     [held(1, "alice", 32, running=3600), held(2, "bob", 32, running=3600)], [CAP64],
     [Decision(10, False, "quota: 64/64 v5e chips in us-west4 held by alice 32, bob 32; 1st in band normal")]),
    ("no eviction that would not be enough", [wait(10, "carol", 64, band="high")],
     [held(1, "alice", 32, band="low", running=3600), held(2, "bob", 32, band="high", running=3600)], [CAP64],
     [Decision(10, False, "quota: 64/64 v5e chips in us-west4 held by alice 32, bob 32; 1st in band high")]),
    ("a job evicted for one is not counted for the next",
     [wait(10, "carol", 32, band="high"), wait(11, "dave", 32, band="high")],
     [held(1, "alice", 32, band="low", running=3600), held(2, "bob", 32, band="low", running=900)], [CAP64],
     [Decision(10, False, "quota: 64/64 v5e chips in us-west4 held by alice 32, bob 32; 1st in band high; "
                          "evicting 1 lower-band job(s)", evict=(2,)),
      Decision(11, False, "quota: 64/64 v5e chips in us-west4 held by alice 32, bob 32; 2nd in band high")]),
]


@pytest.mark.parametrize("name,waiters,holders,caps,expected", CASES, ids=[c[0] for c in CASES])
def test_plan(name, waiters, holders, caps, expected):
    # The estimates (starts_in, unknown) have their own test below.
    def decided(decisions):
        return [(x.job_id, x.admit, x.reason, x.evict) for x in decisions]

    assert decided(plan(waiters, holders, caps).decisions) == decided(expected)


def test_fair_share_picks_the_lowest_weighted_decayed_usage_within_a_band():
    waiters = [wait(10, "alice", 8), wait(11, "alice", 8), wait(12, "bob", 8), wait(13, "carol", 8)]
    # alice used 100 chip-hours, bob 40 with weight 2 (share 20), carol none: carol, bob, then
    # alice and bob alternate as each admission adds its chips (8 x 1 h) to the owner's share.
    ranked = order(waiters, {"alice": 100.0, "bob": 40.0}, {"bob": 2.0}, [])
    assert [w.job_id for w in ranked] == [13, 12, 10, 11]
    # The chips an owner holds now count as well: dave's 64 held put him after erin.
    ranked = order([wait(20, "dave", 8), wait(21, "erin", 8)], {}, {}, [held(1, "dave", 64)])
    assert [w.job_id for w in ranked] == [21, 20]


def test_decayed_chip_hours_halve_per_half_life():
    h = HALF_LIFE_HOURS * 3600
    now = 10 * h
    # A chip-hour just ended counts about 1 (its own hour decays it by 1.4 %); one a half-life old
    # exactly half of that.
    recent = decayed_chip_hours(1, now - 3600, now, now)
    assert recent == pytest.approx(1.0, rel=0.02)
    assert decayed_chip_hours(1, now - h - 3600, now - h, now) == pytest.approx(recent / 2)
    # The closed form: chips * H / ln 2 * (1 - 2^-1) for one whole half-life ending now.
    assert decayed_chip_hours(8, now - h, now, now) == pytest.approx(8 * HALF_LIFE_HOURS / math.log(2) / 2)
    assert decayed_chip_hours(8, now, now, now) == 0.0


def test_exceeded_names_the_cap_a_recheck_would_refuse():
    caps = [Cap("v5e", "", "", 128), CAP64]
    assert exceeded(d(8), caps, FULL) == CAP64
    assert exceeded(d(8), caps, FULL[:1]) is None


def test_a_waiting_job_is_told_when_the_holders_estimated_ends_free_its_chips():
    ending = [Holder(1, "alice", "normal", d(32), running_seconds=60, seconds_left=600),
              Holder(2, "bob", "normal", d(32), running_seconds=60, seconds_left=3600)]
    decisions = plan([wait(10, "carol", 8), wait(11, "dave", 24), wait(12, "erin", 16)], ending, [CAP64]).decisions
    # carol's 8 and dave's 24 fit in alice's 32 (600 s); erin's 16 more need bob's too.
    assert [x.starts_in for x in decisions] == [600, 600, 3600]
    unknown = [ending[0], Holder(2, "bob", "normal", d(32), running_seconds=60)]
    (decision,) = plan([wait(10, "carol", 48)], unknown, [CAP64]).decisions
    # Never a guess: the estimate names whose end is not known.
    assert (decision.starts_in, decision.unknown) == (None, "unknown: bob's job 000002 reports no ETA")
    starting = Holder(3, "dave", "normal", d(32), no_end="has not started running (PROVISIONING)")
    (decision,) = plan([wait(10, "carol", 48)], unknown[1:] + [starting], [CAP64]).decisions
    assert decision.unknown == ("unknown: bob's job 000002 reports no ETA; "
                                "dave's job 000003 has not started running (PROVISIONING)")
    # A cap too small for the job and those ahead: no end frees enough.
    (first, second) = plan([wait(10, "carol", 48), wait(11, "erin", 32)], ending, [CAP64]).decisions
    assert (first.starts_in, second.starts_in) == (3600, None)
    assert second.unknown == ("unknown: a quota of 64 v5e chips in us-west4 is too small for this job "
                              "and those ahead of it")
    # Evictions under way: admitted once they have stopped, in a time set by their grace.
    (evicting,) = plan([wait(10, "carol", 32, band="high")], [held(1, "alice", 64, band="low", running=3600)],
                       [CAP64]).decisions
    assert (evicting.evict, evicting.starts_in, evicting.unknown) == (
        (1,), None, "unknown: admitted once 1 lower-band job(s) have checkpointed and stopped (their grace)")
