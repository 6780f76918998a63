"""What a job's resolved spec says the sweep may do: its requeue Policy, its placements, the
runtime version and network of each attempt's slice. Pure functions over the stored spec."""

from __future__ import annotations

from tpujob.reconcile.decide import Policy


def placements(spec: dict) -> list[tuple[str, str]]:
    """[(accelerator, zone)] of the primary placement then each fallback, from a resolved spec."""
    tpu = spec["spec"]["tpu"]
    first = (spec["accelerator"], spec["zone"])
    return [first] + [(fb.get("accelerator") or first[0], fb.get("zone") or first[1])
                      for fb in tpu.get("fallback", [])]


def policy_of(spec: dict) -> Policy:
    from tpujob.runtime.contract import EXIT_CONFIG, EXIT_INIT_CHECK, EXIT_NAN, EXIT_PREEMPTED, EXIT_RECOMPILE
    from tpujob.spec import RequeuePolicy

    # Through the model: a job recorded before a key existed gets that key's default.
    r = RequeuePolicy.model_validate(spec["spec"]["requeue"])
    return Policy(max_preemptions=r.max_preemptions, max_failures=r.max_failures, max_nan=r.max_nan,
                  backoff_seconds=r.backoff_seconds, queue_timeout_seconds=r.queue_timeout_seconds,
                  provision_timeout_seconds=r.provision_timeout_seconds,
                  setup_timeout_seconds=r.setup_timeout_seconds,
                  unhealthy_grace_seconds=r.unhealthy_grace_seconds,
                  max_capacity_retries=r.max_capacity_retries, min_run_seconds=r.min_run_seconds,
                  nan_exit_code=EXIT_NAN,
                  preempted_exit_code=EXIT_PREEMPTED,
                  fatal_exit_codes=frozenset({EXIT_INIT_CHECK, EXIT_CONFIG, EXIT_RECOMPILE}))


def slice_network(tpu: dict) -> dict:
    """The slice request's network fields from the spec's tpu.network (absent in specs stored
    before it existed: external IPs, the default network)."""
    net = tpu.get("network") or {}
    return dict(external_ips=net.get("external_ips", True), network=net.get("network"),
                subnetwork=net.get("subnetwork"), tags=tuple(net.get("tags", ())))


def runtime_version(spec: dict, accelerator: str) -> str:
    """The spec's runtime_version when it names one; otherwise the default of the attempt's own
    generation: a fallback from v4 to v5e must not boot a v4 image."""
    explicit = spec["spec"]["tpu"].get("runtime_version")
    if explicit:
        return explicit
    from tpujob.catalogue import accelerator as lookup

    return lookup(accelerator).generation.runtime_version
