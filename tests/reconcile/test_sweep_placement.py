"""The sweep against an in-process emulator (real TPU client, hosts stubbed) when Google refuses
a placement for good: a zone that does not offer the accelerator, a regional quota of 0; and a
slice preempted under its setup (a disk attach refused on a PREEMPTED node)."""

from __future__ import annotations

from test_sweep import PROJECT, V5E, Z1, Z2, Hosts, add_job, cloud_for, events, spec

from tpujob.emulator.market import Market, ZoneMarket
from tpujob.reconcile.reconciler import Reconciler


def attempts(store, job):
    return [(a.zone, a.accelerator, a.end_reason) for a in store.attempts(job.id)]


def nodes(server, zone):
    return [n["name"].rsplit("/", 1)[1] for n in server.emulator.tpu.list_nodes(f"projects/{PROJECT}/locations/{zone}")]


def test_a_zone_that_does_not_offer_the_accelerator_moves_to_the_fallback(server, store):
    # v5e is not offered in us-central2-b; the fallback zone offers it.
    job = add_job(store, spec(Z1, f"[{{zone: {Z2}}}]", accelerator=V5E))
    rec = Reconciler(store, cloud_for(server), Hosts(), "me")
    rec.sweep()
    rec.sweep()
    after = store.get(job.id)
    assert (after.state, after.zone, after.placement, after.capacity_misses) == ("RUNNING", Z2, 1, 0)
    assert attempts(store, job) == [(Z1, V5E, "unavailable"), (Z2, V5E, None)]
    said = events(store, job.id)
    assert any(e.startswith("state: this placement is refused: creating node tpujob-")
               and f'could not be found in the zonal accelerator configurations for "{Z1}"' in e
               and e.endswith("; trying the next placement") for e in said), said
    assert f"fallback: moving to {V5E} in {Z2}" in said


def test_a_zone_that_does_not_offer_the_accelerator_without_fallback_fails_user_error(server, store):
    job = add_job(store, spec(Z1, accelerator=V5E))
    rec = Reconciler(store, cloud_for(server), Hosts(), "me")
    rec.sweep()
    after = store.get(job.id)
    assert (after.state, after.end_reason) == ("FAILED", "user_error")
    assert attempts(store, job) == [(Z1, V5E, "unavailable")]
    assert any(e.startswith("state: this placement is refused: creating node tpujob-")
               and f"the accelerator {V5E} was not found in zone {Z1} [EID: 0x" in e for e in events(store, job.id))
    seen = len(store.events(job.id))
    rec.sweep()
    assert len(store.events(job.id)) == seen and nodes(server, Z1) == []


def test_when_no_placement_offers_the_accelerator_the_job_fails_after_trying_each_once(server, store):
    job = add_job(store, spec(Z1, "[{zone: us-east1-d}, {zone: asia-northeast1-a}]", accelerator=V5E))
    Reconciler(store, cloud_for(server), Hosts(), "me").sweep()
    after = store.get(job.id)
    assert (after.state, after.end_reason) == ("FAILED", "user_error")
    assert attempts(store, job) == [(Z1, V5E, "unavailable"), ("us-east1-d", V5E, "unavailable"),
                                    ("asia-northeast1-a", V5E, "unavailable")]
    assert 'The requested zone "asia-northeast1-a" is not supported' in after_event(store, job)


def after_event(store, job) -> str:
    return [e for e in events(store, job.id) if e.startswith("state:")][-1]


QUOTA = "Quota limit 'TPUV5sLitepodPreemptiblePerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0 in region {}."


def no_quota_in(server, region: str):
    """The emulator answers the next node create with Google's regional-quota 429 (marin PR #1612
    quotes it), through fail-next: the real client and classifier read it."""
    server.emulator.fail_next.queue("tpu.projects.locations.nodes.create", 429, QUOTA.format(region),
                              grpc_status="RESOURCE_EXHAUSTED", times=1)
    return cloud_for(server)


def test_a_regional_quota_of_zero_moves_to_a_fallback_in_another_region(server, store):
    job = add_job(store, spec("us-east5-a", f"[{{zone: us-east5-b}}, {{zone: {Z2}}}]", accelerator=V5E))
    rec = Reconciler(store, no_quota_in(server, "us-east5"), Hosts(), "me")
    rec.sweep()
    rec.sweep()
    after = store.get(job.id)
    # Not FAILED no_capacity, and us-east5-b (the same region, the same quota) is passed over.
    assert (after.state, after.zone, after.placement) == ("RUNNING", Z2, 2)
    assert attempts(store, job) == [("us-east5-a", V5E, "no_quota"), (Z2, V5E, None)]
    assert any("quota exhausted: creating node" in e and "Limit: 0 in region us-east5" in e
               and e.endswith("trying a placement in another region") for e in events(store, job.id))


def test_a_regional_quota_of_zero_without_a_fallback_elsewhere_fails_no_capacity(server, store):
    job = add_job(store, spec("us-east5-a", "[{zone: us-east5-b}]", accelerator=V5E))
    Reconciler(store, no_quota_in(server, "us-east5"), Hosts(), "me").sweep()
    after = store.get(job.id)
    assert (after.state, after.end_reason) == ("FAILED", "no_capacity")
    assert attempts(store, job) == [("us-east5-a", V5E, "refused")]
    assert after_event(store, job).startswith("state: quota exhausted: creating node")


def test_a_node_update_refused_on_a_preempted_node_ends_the_attempt_as_a_preemption(server, store):
    from google.cloud import tpu_v2
    from google.protobuf import field_mask_pb2

    cloud = cloud_for(server)

    class PreemptedUnderSetup(Hosts):
        """The slice is preempted as setup begins; setup's first step updates the node (a
        documented mask field: tpu.v2.json nodes.patch)."""

        def start_setup(self, job, attempt, slice_):
            if attempt.number == 1:
                server.emulator.host_faults.preempt(attempt.slice_name)
                name = f"projects/{PROJECT}/locations/{attempt.zone}/nodes/{attempt.slice_name}"
                cloud._call(f"labelling node {attempt.slice_name}", cloud._client.update_node,
                            node=tpu_v2.Node(name=name, labels={"step": "setup"}),
                            update_mask=field_mask_pb2.FieldMask(paths=["labels"]))
            return super().start_setup(job, attempt, slice_)

    job = add_job(store, spec(Z1))
    rec = Reconciler(store, cloud, PreemptedUnderSetup(), "me")
    rec.sweep()  # the slice is requested
    rec.sweep()  # READY: setup meets the preemption; the attempt ends in this very sweep
    after = store.get(job.id)
    assert (after.attempt, after.preemptions) == (2, 1) and after.state in ("PROVISIONING", "RUNNING")
    assert [a.end_reason for a in store.attempts(job.id)] == ["preempted", None]
    assert any(e.startswith("setup: setup stopped, the slice is PREEMPTED: labelling node tpujob-")
               and "state PREEMPTED" in e for e in events(store, job.id))
    first = store.attempts(job.id)[0].slice_name
    assert first not in nodes(server, Z1)  # deleted: a preempted node holds quota
    rec.sweep()
    assert store.get(job.id).state == "RUNNING"


def _moved_then_preempted(server, store, placement: str):
    """A job whose best placement (its first) stocked out, moved to the fallback, ran there and
    was preempted there, the stockout over by then: where its next attempt goes."""
    server.emulator.world.stockout(Z1, None, clear=False)
    job = add_job(store, spec(Z1, f"[{{accelerator: {V5E}, zone: {Z2}}}]", tpu_extra=f", placement: {placement}"))
    rec = Reconciler(store, cloud_for(server), Hosts(), "me")
    for _ in range(5):
        if store.get(job.id).state == "RUNNING":
            break
        rec.sweep()
    assert (store.get(job.id).state, store.get(job.id).zone) == ("RUNNING", Z2)
    server.emulator.world.stockout(Z1, None, clear=True)
    server.emulator.host_faults.preempt(store.current_attempt(job.id).slice_name)
    for _ in range(5):
        rec.sweep()
        if store.get(job.id).preemptions and store.get(job.id).state == "RUNNING":
            break
    return [(a.zone, a.end_reason) for a in store.attempts(job.id)]


def test_placement_auto_goes_back_to_its_best_placement_after_a_preemption(server, store):
    assert _moved_then_preempted(server, store, "auto") == [
        (Z1, "no_capacity"), (Z2, "preempted"), (Z1, None)]


def test_placements_as_written_stay_where_the_preemption_was(server, store):
    assert _moved_then_preempted(server, store, "ordered") == [
        (Z1, "no_capacity"), (Z2, "preempted"), (Z2, None)]


def test_checkpoint_every_auto_is_handed_the_store_s_mtbi_at_each_attempt(server, store):
    from tpujob.attempt.host_attempts import mtbi_env
    from tpujob.runtime.contract import ENV_MTBI_SECONDS, Reported
    from tpujob.runtime.spacing import DEFAULT_MTBI_S

    text = spec(Z1).replace("run: {command: train}", "run: {runtime: {checkpoint_every: auto}}")
    job = add_job(store, text)
    Reconciler(store, cloud_for(server), Hosts(), "me").sweep()
    attempt = store.current_attempt(job.id)
    # a store with no history: the prior, a day, and the event says so
    assert Reported.parse(attempt.reported).mtbi == DEFAULT_MTBI_S
    assert mtbi_env(attempt.reported) == {ENV_MTBI_SECONDS: str(int(DEFAULT_MTBI_S))}
    assert any(e.startswith("checkpoint: checkpoint_every auto: M 1d") and "(0 runs, 0 interruptions, the prior)" in e
               for e in events(store, job.id)), events(store, job.id)


def test_a_fixed_checkpoint_interval_is_handed_nothing(server, store):
    job = add_job(store, spec(Z1))
    Reconciler(store, cloud_for(server), Hosts(), "me").sweep()
    assert store.current_attempt(job.id).reported is None


def test_the_market_s_history_in_real_sweeps_puts_placement_auto_in_the_calm_zone(server, store):
    """A seeded market preempts slices in us-east5-a every second or so and never in us-east5-b.
    A job written a-then-b stays in a through its preemptions (as written); the history those
    sweeps record ranks b first for the next job, which then runs there."""
    import time

    from tpujob.reconcile.history import history
    from tpujob.reconcile.risk import ordered

    flaky, calm = "us-east5-a", "us-east5-b"
    server.emulator.tpu.set_market(Market(5, {flaky: ZoneMarket(1.0, 0.0), calm: ZoneMarket(1e9, 0.0)}, drift=0),
                               tick=0.05)
    first = add_job(store, spec(flaky, f"[{{zone: {calm}}}]", "max_preemptions: 50", accelerator=V5E,
                                name="written"))
    rec = Reconciler(store, cloud_for(server), Hosts(), "me")
    deadline = time.monotonic() + 120
    while store.get(first.id).preemptions < 3:  # the market's doing: nothing here preempts
        assert time.monotonic() < deadline, [e for e in events(store, first.id)][-5:]
        rec.sweep()
    assert {a.zone for a in store.attempts(first.id)} == {flaky}
    places = [(V5E, flaky), (V5E, calm)]
    ranked = ordered(places, "spot", history(store, time.time()), lambda accelerator: 1.0)
    assert [places[c.index][1] for c in ranked] == [calm, flaky]
    second = add_job(store, spec(flaky, f"[{{zone: {calm}}}]", accelerator=V5E, name="auto",
                                 tpu_extra=", placement: auto"),
                     placement_order=[c.index for c in ranked])
    for _ in range(5):
        rec.sweep()
        if store.get(second.id).state == "RUNNING":
            break
    assert (store.get(second.id).state, store.current_attempt(second.id).zone) == ("RUNNING", calm)
    server.emulator.tpu.set_market(None)
