"""The sweep against an in-process emulator (the real TPU and Compute clients), with the hosts
side stubbed: what one sweep does when a zone cannot be listed, a job hits a bug, the cloud
refuses a create for good, capacity is missing everywhere, or a fallback changes generation."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tpujob import spec as spec_mod
from tpujob.cloud.base import Slice, SlicePhase
from tpujob.errors import CloudError
from tpujob.reconcile.observation import HostObservation, Program, Setup, SetupSeen, SliceCondition
from tpujob.reconcile.reconciler import Reconciler
from tpujob.spec.stored import spec_of

PROJECT = "tpujob-sweep"
# v4 is offered only in us-central2-b (Google's zone table): the second zone runs a v5e.
Z1, Z2 = "us-central2-b", "us-central1-a"
V5E = "v5litepod-4"


@dataclass
class Hosts:
    """The hosts side of a sweep, stubbed: launches are recorded, programs always run."""

    fail_for: set = field(default_factory=set)  # job ids whose launch hits a bug
    launched: list = field(default_factory=list)
    prepared: list = field(default_factory=list)  # job ids whose slice was asked for
    disks: object = None  # callable(job, attempt) -> data disks, as SshHostOps.data_disks

    def start_setup(self, job, attempt, slice_):
        if job.id in self.fail_for:
            raise RuntimeError("a bug in setup")
        return self.setup_status(job, attempt, slice_)

    def setup_status(self, job, attempt, slice_):
        return SetupSeen(tuple(Setup.DONE for _ in slice_.hosts))  # a setup done as it starts

    def launch(self, job, attempt, slice_):
        self.launched.append((job.id, attempt.number))

    def program_status(self, job, attempt, slice_):
        return tuple(HostObservation(Program.RUNNING) for _ in slice_.hosts)

    def stop_program(self, job, attempt, slice_, grace_seconds=30):
        pass

    def unmount(self, job, attempt, slice_):
        pass

    def data_disks(self, job, attempt):
        return self.disks(job, attempt) if self.disks else ()

    def prepare(self, job):
        self.prepared.append(job.id)


def cloud_for(server, cls=None):
    from tpujob.cloud.tpu_api import GcpCloud

    return (cls or GcpCloud).for_emulator(server.url, retry_initial=0.01, retry_maximum=0.05,
                                          poll_interval=0.01)


def add_job(store, text: str, **tweak):
    parsed, lines = spec_mod.parse(text)
    resolved = spec_mod.resolve(parsed, lines, default_project=PROJECT).to_json_dict()
    resolved.update(tweak)
    return store.add_job(name=parsed.name, spec_yaml=text, spec_json=json.dumps(resolved),
                         accelerator=resolved["accelerator"], zone=resolved["zone"], project=PROJECT,
                         cloud="local")


def spec(zone=Z1, fallback="", requeue="", name="sw", tpu_extra="", accelerator=None):
    fallback = f", fallback: {fallback}" if fallback else ""
    requeue = f", {requeue}" if requeue else ""
    accelerator = accelerator or ("v4-8" if zone == Z1 else V5E)
    return (f"name: {name}\n"
            f"tpu: {{accelerator: {accelerator}, zone: {zone}, queued: false{tpu_extra}{fallback}}}\n"
            f"requeue: {{backoff_seconds: 0{requeue}}}\n"
            "run: {command: train}\n")


def events(store, job_id):
    return [f"{e.kind}: {e.message}" for e in store.events(job_id)]


def test_one_zone_that_cannot_be_listed_skips_only_its_jobs(server, store):
    from tpujob.cloud.tpu_api import GcpCloud

    class ZoneDown(GcpCloud):
        down: set = set()

        def list_slices(self, project, zone):
            if zone in self.down:
                raise CloudError(f"listing nodes in {zone}: ServiceUnavailable: zone outage")
            return super().list_slices(project, zone)

    cloud = cloud_for(server, ZoneDown)
    rec = Reconciler(store, cloud, Hosts(), "me")
    a, b = add_job(store, spec(Z1, name="a")), add_job(store, spec(Z2, name="b"))
    for _ in range(3):
        rec.sweep()
    assert [store.get(j.id).state for j in (a, b)] == ["RUNNING", "RUNNING"]
    for job in (a, b):
        server.emulator.host_faults.preempt(store.current_attempt(job.id).slice_name)

    ZoneDown.down = {Z1}
    report = rec.sweep()
    assert report.errors == [f"{PROJECT}/{Z1}: listing failed, 1 job(s) skipped: "
                             f"listing nodes in {Z1}: ServiceUnavailable: zone outage"]
    # The job in the zone that answered was handled; the other was not judged on no listing.
    assert (store.get(b.id).attempt, store.get(b.id).preemptions) == (2, 1)
    assert (store.get(a.id).state, store.get(a.id).attempt) == ("RUNNING", 1)

    ZoneDown.down = set()
    assert rec.sweep().errors == []
    assert (store.get(a.id).attempt, store.get(a.id).preemptions) == (2, 1)


def test_a_bug_met_on_one_job_does_not_stop_the_others(server, store):
    a, b = add_job(store, spec(name="a")), add_job(store, spec(name="b"))
    rec = Reconciler(store, cloud_for(server), Hosts(fail_for={a.id}), "me")
    report = rec.sweep()  # the nodes come up READY at their create: set up in the same sweep
    assert report.errors == [f"job {a.id:06d}: unexpected RuntimeError: a bug in setup"]
    assert store.get(b.id).state == "RUNNING"
    assert "error: unexpected RuntimeError: a bug in setup" in events(store, a.id)
    assert store.get(a.id).lease_owner is None  # released: the next sweep may try again


def test_a_create_the_cloud_refuses_ends_the_job_instead_of_looping(server, store):
    # An accelerator type the zone does not offer: the API answers 400 whatever the retries.
    job = add_job(store, spec(tpu_extra=", runtime_version: tpu-ubuntu2204-base"), accelerator="v4-7")
    rec = Reconciler(store, cloud_for(server), Hosts(), "me")
    rec.sweep()
    after = store.get(job.id)
    assert (after.state, after.end_reason) == ("FAILED", "user_error")
    # Google reads an accelerator type that does not exist as one the zone does not offer.
    assert [a.end_reason for a in store.attempts(job.id)] == ["unavailable"]
    assert any(e.startswith("state: this placement is refused: creating node tpujob-")
               and "BadRequest" in e and "v4-7" in e for e in events(store, job.id))
    seen = len(store.events(job.id))
    rec.sweep()
    assert len(store.events(job.id)) == seen and store.get(job.id).attempt == 1


def test_a_misspelled_snapshot_ends_the_job_with_its_name(server, store):
    from tpujob.attempt import slice_disks as disks
    from tpujob.cloud.disks import GcpCompute

    compute = GcpCompute.for_emulator(server.url, server.url)
    hosts = Hosts(disks=lambda job, attempt: disks.data_disks(
        compute, spec_of(job), job.id, attempt.zone, store.store_tag))
    job = add_job(store, spec() + "disks: [{name: data-clone, snapshot: no-such-snap, mount: /mnt/d}]\n")
    rec = Reconciler(store, cloud_for(server), hosts, "me")
    rec.sweep()
    after = store.get(job.id)
    assert (after.state, after.end_reason) == ("FAILED", "user_error")
    assert any("refused" in e and "no-such-snap" in e for e in events(store, job.id))
    assert server.emulator.tpu.list_nodes(f"projects/{PROJECT}/locations/{Z1}") == []


def test_stockouts_everywhere_cycle_the_placements_then_fail_no_capacity(server, store):
    server.emulator.world.stockout(Z1, None, clear=False)
    server.emulator.world.stockout(Z2, None, clear=False)
    job = add_job(store, spec(Z1, f"[{{accelerator: {V5E}, zone: {Z2}}}]", "max_capacity_retries: 3"))
    rec = Reconciler(store, cloud_for(server), Hosts(), "me")
    # A sweep follows the creates it asked for to their end: the primary misses, and the
    # fallback's create (backoff 0) is asked for in the same sweep, its end left to the next.
    rec.sweep()
    assert (store.get(job.id).state, store.get(job.id).capacity_misses, store.get(job.id).attempt) == \
        ("PROVISIONING", 1, 2)
    rec.sweep()  # the fallback's miss, the primary's create, followed: its miss, the fallback's create
    assert (store.get(job.id).state, store.get(job.id).capacity_misses) == ("PROVISIONING", 3)
    rec.sweep()
    after = store.get(job.id)
    assert (after.state, after.end_reason, after.capacity_misses) == ("FAILED", "no_capacity", 4)
    # Primary, fallback, then back to the primary: capacity returns where it was missing.
    assert [(a.zone, a.end_reason) for a in store.attempts(job.id)] == [
        (Z1, "no_capacity"), (Z2, "no_capacity"), (Z1, "no_capacity"), (Z2, "no_capacity")]
    assert any("capacity miss 2 of 3 allowed, the next placement in 0 s" in e for e in events(store, job.id))


def test_capacity_found_again_resets_the_misses(server, store):
    server.emulator.world.stockout(Z1, None, clear=False)
    job = add_job(store, spec(Z1, requeue="max_capacity_retries: 5"))
    rec = Reconciler(store, cloud_for(server), Hosts(), "me")
    rec.sweep()
    rec.sweep()
    assert (store.get(job.id).state, store.get(job.id).capacity_misses) == ("PROVISIONING", 3)
    server.emulator.world.stockout(Z1, None, clear=True)
    for _ in range(3):
        rec.sweep()
    after = store.get(job.id)
    # Attempt 4's create was asked for while the zone was out: its miss comes first.
    assert (after.state, after.capacity_misses, after.attempt) == ("RUNNING", 0, 5)


def test_a_fallback_to_another_generation_boots_that_generation_s_runtime(server, store):
    server.emulator.world.stockout(Z1, None, clear=False)
    job = add_job(store, spec(Z1, f"[{{accelerator: v5litepod-4, zone: {Z2}}}]"))
    rec = Reconciler(store, cloud_for(server), Hosts(), "me")
    rec.sweep()
    rec.sweep()
    attempt = store.current_attempt(job.id)
    assert (attempt.accelerator, store.get(job.id).state) == ("v5litepod-4", "RUNNING")
    node = server.emulator.tpu.get_node(f"projects/{PROJECT}/locations/{Z2}/nodes/{attempt.slice_name}")
    assert node["runtimeVersion"] == "v2-alpha-tpuv5-lite"  # not the primary's tpu-ubuntu2204-base


def test_an_explicit_runtime_version_is_kept_on_every_fallback(server, store):
    server.emulator.world.stockout(Z1, None, clear=False)
    job = add_job(store, spec(Z1, f"[{{accelerator: v5litepod-4, zone: {Z2}}}]",
                              tpu_extra=", runtime_version: my-image"))
    rec = Reconciler(store, cloud_for(server), Hosts(), "me")
    rec.sweep()
    rec.sweep()
    attempt = store.current_attempt(job.id)
    node = server.emulator.tpu.get_node(f"projects/{PROJECT}/locations/{Z2}/nodes/{attempt.slice_name}")
    assert node["runtimeVersion"] == "my-image"


def test_provisioning_is_timed_from_the_node_s_create_time(server, store):
    job = add_job(store, spec())
    rec = Reconciler(store, cloud_for(server), Hosts(), "me", clock=lambda: 10_000.0)
    creating = Slice(name="n", zone=Z1, phase=SlicePhase.PROVISIONING, node_create_time=9_940.0)
    observed = rec.observer.observe(store.get(job.id), None, creating)
    assert (observed.slice, observed.provisioning_seconds) == (SliceCondition.PROVISIONING, 60.0)
    queued = Slice(name="n", zone=Z1, phase=SlicePhase.PROVISIONING)  # queued resource, no node yet
    assert rec.observer.observe(store.get(job.id), None, queued).provisioning_seconds is None


def test_resume_after_no_capacity_starts_the_capacity_budget_again(server):
    from tpujob.service import jobs
    from tpujob.service.context import Context

    ctx = Context.load()
    server.emulator.world.stockout(Z1, None, clear=False)
    job = add_job(ctx.store, spec(Z1, requeue="max_capacity_retries: 2"))
    rec = Reconciler(ctx.store, cloud_for(server), Hosts(), "me")
    rec.sweep()
    rec.sweep()
    assert (ctx.store.get(job.id).state, ctx.store.get(job.id).end_reason) == ("FAILED", "no_capacity")
    resumed = jobs.resume(ctx, str(job.id))
    assert (resumed.state, resumed.capacity_misses) == ("RECOVERING", 0)
    rec.sweep()  # still stocked out: one miss, within the fresh budget of two (the next asked for)
    assert (ctx.store.get(job.id).state, ctx.store.get(job.id).capacity_misses) == ("PROVISIONING", 1)
    server.emulator.world.stockout(Z1, None, clear=True)
    rec.sweep()
    rec.sweep()
    assert ctx.store.get(job.id).state == "RUNNING"


def test_the_running_jobs_hosts_are_asked_at_once_and_once_per_sweep(server, store):
    import threading

    class MeetingHosts(Hosts):
        """Once `meeting`, program_status returns only when three askers are in it together:
        asked one after another, the barrier breaks and the hosts read UNREACHABLE."""

        def __init__(self):
            super().__init__()
            self.barrier = threading.Barrier(3, timeout=5)
            self.meeting = False
            self.asked: list = []

        def program_status(self, job, attempt, slice_):
            if self.meeting:
                self.asked.append(job.id)
                try:
                    self.barrier.wait()
                except threading.BrokenBarrierError:
                    return tuple(HostObservation(Program.UNREACHABLE) for _ in slice_.hosts)
            return super().program_status(job, attempt, slice_)

    hosts = MeetingHosts()
    rec = Reconciler(store, cloud_for(server), hosts, "me")
    jobs = [add_job(store, spec(name=f"j{i}")) for i in range(3)]
    for _ in range(3):
        rec.sweep()
    assert [store.get(j.id).state for j in jobs] == ["RUNNING"] * 3
    hosts.meeting = True
    report = rec.sweep()
    assert report.errors == []
    assert sorted(hosts.asked) == sorted(j.id for j in jobs)  # each once, all together
    assert all(store.get(j.id).unhealthy_since is None for j in jobs)


def test_a_sweep_follows_its_creates_and_still_ends_one_stuck_creating(tmp_path, store, monkeypatch):
    """The sweep follows the node it asked for, deciding on it while it is CREATING (once a
    `FOLLOW_RECHECK_SECONDS`), so the provisioning timeout ends one that never comes up, and
    stops following after `CREATE_FOLLOW_SECONDS`, the job left to the next sweep."""
    from tpujob.emulator.server import EmulatorServer
    from tpujob.reconcile import reconciler as reconciler_mod

    monkeypatch.setattr(reconciler_mod, "FOLLOW_RECHECK_SECONDS", 0.3)
    monkeypatch.setattr(reconciler_mod, "CREATE_FOLLOW_SECONDS", 4.0)
    with EmulatorServer(tmp_path / "slow", provisioning_delay=8.0, storage=False) as slow:
        stuck = add_job(store, spec(name="stuck", requeue="provision_timeout_seconds: 1, max_capacity_retries: 5"))
        rec = Reconciler(store, cloud_for(slow), Hosts(), "me")
        rec.sweep()
        said = events(store, stuck.id)
        assert any("slice stuck provisioning for" in e for e in said), said
        after = store.get(stuck.id)
        # The next attempt's node, asked for in the same sweep, is left to the next sweep.
        assert (after.state, after.attempt, after.capacity_misses) == ("PROVISIONING", 2, 1)
