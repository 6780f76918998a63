"""What a job's resolved spec says the sweep may do: its requeue Policy, its placements, the
runtime version and network of each attempt's slice. Pure functions over the stored spec."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpujob.catalogue import COMPUTE
from tpujob.store.states import AttemptEnd

if TYPE_CHECKING:
    from tpujob.reconcile.observation import JobView
    from tpujob.spec import ResolvedSpec


@dataclass(frozen=True)
class Policy:
    max_preemptions: int
    max_failures: int
    max_nan: int
    backoff_seconds: float
    queue_timeout_seconds: float = 6 * 3600
    provision_timeout_seconds: float = 30 * 60  # a node stuck CREATING
    setup_timeout_seconds: float = 15 * 60  # per attempt, scaled by host count in `setup_timeout`
    unhealthy_grace_seconds: float = 120
    max_capacity_retries: int = 48
    max_backoff_seconds: float = 30 * 60  # capacity misses and flaps double the wait up to this
    min_run_seconds: float = 600  # a preemption after a shorter run is a flap
    nan_exit_code: int = 76
    preempted_exit_code: int = 75
    # Exits that say the program or its config is wrong (the runtime's init check, bad config,
    # strict-shapes recompile): running it again on any hardware gives the same answer.
    fatal_exit_codes: frozenset[int] = frozenset({77, 78, 79})
    heartbeat_timeout_seconds: float = 300  # spec.RequeuePolicy says why
    maintenance_lead_seconds: float = 300  # spec.RequeuePolicy says why
    max_bad_hosts: int = 3  # spec.RequeuePolicy says why
    max_hangs: int = 3
    hang_seconds: float | None = None  # run.hang_seconds: a silent log this long is a hang
    # Elastic multislice (tpu.slices {min, max}): train on as few as min while slices are lost.
    min_slices: int = 1
    max_slices: int = 1

    @property
    def elastic(self) -> bool:
        return self.min_slices < self.max_slices

    def setup_timeout(self, hosts: int) -> float:
        # Fan-out is parallel, but installs contend for the same mirrors and buckets.
        return self.setup_timeout_seconds * (1 + hosts / 32)

    def backoff(self, job: JobView) -> float:
        """The wait in RECOVERING before the next attempt. After a preemption: none (a preemption
        is not the job's fault, and the zone had capacity a moment ago), unless the attempt
        flapped (ran under min_run_seconds): then backoff_seconds, doubled per flap in a row.
        After anything else: backoff_seconds, doubled for each capacity miss in a row (a zone
        out of capacity now is likely out in a minute too). Both doublings stop at
        max_backoff_seconds. Plus up to 20% jitter so that jobs stocked out or flapping together
        do not all come back in the same second. The jitter is a hash of the job id and attempt
        number, not a random draw: decide stays a pure function."""
        wait, doublings = self.backoff_seconds, job.capacity_misses
        if job.last_end == AttemptEnd.BAD_HOST:
            return 0.0  # the hardware's fault, not the program's: a new slice at once
        if job.last_end == AttemptEnd.PREEMPTED:
            if job.flaps == 0:
                return 0.0
            doublings = job.flaps
        if doublings > 0:
            wait = min(wait * 2 ** (doublings - 1), max(self.max_backoff_seconds, wait))
        digest = hashlib.sha256(f"{job.job_id}:{job.attempt}".encode()).digest()
        return wait * (1 + JITTER * int.from_bytes(digest[:4], "big") / 2**32)


JITTER = 0.2




def policy_of(spec: ResolvedSpec) -> Policy:
    from tpujob.runtime.contract import EXIT_CONFIG, EXIT_INIT_CHECK, EXIT_NAN, EXIT_PREEMPTED, EXIT_RECOMPILE

    r = spec.spec.requeue
    return Policy(max_preemptions=r.max_preemptions, max_failures=r.max_failures, max_nan=r.max_nan,
                  backoff_seconds=r.backoff_seconds, queue_timeout_seconds=r.queue_timeout_seconds,
                  provision_timeout_seconds=r.provision_timeout_seconds,
                  setup_timeout_seconds=r.setup_timeout_seconds,
                  unhealthy_grace_seconds=r.unhealthy_grace_seconds,
                  max_capacity_retries=r.max_capacity_retries, min_run_seconds=r.min_run_seconds,
                  heartbeat_timeout_seconds=r.heartbeat_timeout_seconds,
                  maintenance_lead_seconds=r.maintenance_lead_seconds,
                  max_bad_hosts=r.max_bad_hosts,
                  max_hangs=r.max_hangs, hang_seconds=spec.spec.run.hang_seconds,
                  min_slices=spec.spec.tpu.min_slices, max_slices=spec.spec.tpu.max_slices,
                  nan_exit_code=EXIT_NAN,
                  preempted_exit_code=EXIT_PREEMPTED,
                  fatal_exit_codes=frozenset({EXIT_INIT_CHECK, EXIT_CONFIG, EXIT_RECOMPILE}))


def slice_network(spec: ResolvedSpec) -> dict[str, Any]:
    """The slice request's network fields from the spec's tpu.network."""
    net = spec.spec.tpu.network
    return dict(external_ips=net.external_ips, network=net.network, subnetwork=net.subnetwork,
                tags=tuple(net.tags))


def capacity_wait(spec: ResolvedSpec) -> int | None:
    """How long a create may wait in Google's queue for capacity: the spec's queue timeout, for
    a flex-start VM on Compute Engine (its insert's params.requestValidForDuration, bounded by
    Google there: tpujob.cloud.compute_tpu.flex_wait). None otherwise: the TPU API path bounds
    its waiting itself (decide's queue timeout)."""
    if spec.api == COMPUTE and spec.provisioning == "flex-start":
        return int(spec.spec.requeue.queue_timeout_seconds)
    return None


def runtime_version(spec: ResolvedSpec, accelerator: str) -> str:
    """The spec's runtime_version when it names one; otherwise the default of the attempt's own
    generation: a fallback from v4 to v5e must not boot a v4 image."""
    explicit = spec.spec.tpu.runtime_version
    if explicit:
        return explicit
    from tpujob.catalogue import accelerator as lookup
    from tpujob.compute_shapes import compute_shape

    if spec.api == COMPUTE:  # a Compute Engine TPU VM boots an image family, not a TPU runtime
        return compute_shape(accelerator).image_family
    return lookup(accelerator).generation.runtime_version
