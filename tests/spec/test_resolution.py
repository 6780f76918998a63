"""What valid job specs resolve to: the defaults a researcher expects, per generation and from
the settings, and the requeue policy the sweep reads."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from spec_texts import VALID
from spec_texts import dedent_spec as _spec

from tpujob import spec as spec_mod
from tpujob.errors import SpecError

pytestmark = pytest.mark.usefixtures("no_emulator_left")


def _resolve(text: str, **kwargs):
    spec, lines = spec_mod.parse(text)
    return spec_mod.resolve(spec, lines, **{"default_project": "p", **kwargs})


def _resolve_one_disk(acc: str, zone: str, disk: str):
    """A slice of `acc` in `zone` with one disk, `data` on /mnt/data, and `disk`'s own keys."""
    return _resolve(_spec(f"""
        name: demo
        tpu: {{accelerator: {acc}, zone: {zone}}}
        disks: [{{name: data, mount: /mnt/data, {disk}}}]
        run: {{command: x}}
        """))


def test_defaults_a_researcher_expects():
    r = _resolve(VALID)
    assert r.spec.tpu.provisioning == "spot"
    assert r.spec.tpu.queued is True
    assert r.runtime_version == "tpu-ubuntu2204-base"
    assert (r.hosts, r.chips, r.cores) == (1, 4, 8)
    assert r.spec.requeue.max_preemptions > 0
    assert r.spec.disks == [] and r.spec.buckets == []


@pytest.mark.parametrize("acc, zone, disk_type, runtime", [
    ("v4-32", "us-central2-b", "pd-balanced", "tpu-ubuntu2204-base"),
    ("v5litepod-16", "us-west4-a", "pd-balanced", "v2-alpha-tpuv5-lite"),
    ("v6e-16", "us-east5-b", "hyperdisk-ml", "v2-alpha-tpuv6e"),
])
def test_disk_type_and_runtime_default_per_generation(acc, zone, disk_type, runtime):
    r = _resolve_one_disk(acc, zone, "snapshot: snap")
    assert r.disk_types == {"data": disk_type}
    assert r.runtime_version == runtime
    assert r.spec.disks[0].mode == "read-only"


def test_runtime_version_can_be_pinned():
    r = _resolve(VALID.replace("  zone:", "  runtime_version: tpu-vm-v4-base\n  zone:"))
    assert r.runtime_version == "tpu-vm-v4-base"


def test_read_write_disk_on_a_single_host():
    r = _resolve(_spec("""
        name: dev
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks: [{name: master, mode: read-write, mount: /mnt/master}]
        run: {command: x}
        """))
    assert r.hosts == 1 and r.disk_types == {"master": "pd-balanced"}


@pytest.mark.parametrize("acc, zone, disk_type, source", [
    ("v5litepod-16", "us-west4-a", "hyperdisk-ml", "snapshot: snap"),
    ("v5p-16", "us-east5-a", "hyperdisk-ml", "snapshot: snap"),
    # hyperdisk-balanced is never read-only (tests/spec/test_spec.py): a master on one host.
    ("v6e-8", "us-east5-b", "hyperdisk-balanced", "mode: read-write"),
])
def test_the_generations_other_disk_types_are_taken(acc, zone, disk_type, source):
    r = _resolve_one_disk(acc, zone, f"{source}, type: {disk_type}")
    assert r.disk_types == {"data": disk_type}


def test_zone_and_project_from_settings():
    r = _resolve(VALID.replace("  zone: us-central2-b\n", ""), default_zone="europe-west4-a",
                 default_project="lab")
    assert (r.zone, r.project) == ("europe-west4-a", "lab")


def test_env_scalars_become_strings():
    r = _resolve(VALID + "env: {STEPS: 100, LR: 0.5, DEBUG: true, NAME: x}\n")
    assert r.spec.env == {"STEPS": "100", "LR": "0.5", "DEBUG": "true", "NAME": "x"}


def test_sync_is_resolved_against_the_spec_directory(tmp_path):
    (tmp_path / "code").mkdir()
    path = tmp_path / "job.yaml"
    path.write_text(VALID + "sync: code\n")
    resolved, text = spec_mod.load(path, default_project="p")
    assert resolved.sync_path == str((tmp_path / "code").resolve())
    assert text == path.read_text()


def test_the_example_spec_is_valid():
    from pathlib import Path

    resolved, _ = spec_mod.load(Path(__file__).resolve().parents[2] / "jobs.example.yaml", default_project="p")
    assert (resolved.hosts, resolved.chips) == (2, 8)


def test_spec_error_carries_field_and_line():
    with pytest.raises(SpecError) as info:
        _resolve(VALID.replace("v4-8", "v4-12"))
    assert (info.value.field, info.value.line, info.value.exit_code) == ("tpu.accelerator", 3, 2)


def test_requeue_timeouts_default_and_reach_the_policy():
    from tpujob.reconcile.policy import policy_of

    defaults = policy_of(_resolve(VALID))
    assert (defaults.queue_timeout_seconds, defaults.provision_timeout_seconds, defaults.setup_timeout_seconds,
            defaults.unhealthy_grace_seconds, defaults.max_capacity_retries) == (21600, 1800, 900, 120, 48)
    tuned = policy_of(_resolve(VALID + _spec("""
        requeue:
          queue_timeout_seconds: 7200
          provision_timeout_seconds: 600
          setup_timeout_seconds: 1200.5
          unhealthy_grace_seconds: 30
          max_capacity_retries: 5
        """)))
    assert (tuned.queue_timeout_seconds, tuned.provision_timeout_seconds, tuned.setup_timeout_seconds,
            tuned.unhealthy_grace_seconds, tuned.max_capacity_retries) == (7200, 600, 1200.5, 30, 5)


def test_a_job_recorded_before_the_new_keys_gets_their_defaults():
    from tpujob.reconcile.policy import policy_of
    from tpujob.spec.stored import spec_of

    old = _resolve(VALID).to_json_dict()
    old["spec"]["requeue"] = {"max_preemptions": 4, "max_failures": 1, "max_nan": 2, "backoff_seconds": 5.0}
    del old["spec"]["notify"], old["spec"]["tpu"]["network"]  # keys later versions added
    policy = policy_of(spec_of(SimpleNamespace(spec_json=json.dumps(old))))
    assert (policy.max_preemptions, policy.backoff_seconds, policy.queue_timeout_seconds,
            policy.max_capacity_retries) == (4, 5.0, 21600, 48)
    assert policy.fatal_exit_codes == {77, 78, 79}  # the runtime's code/config errors (docs/runtime.md)


def test_a_boolean_is_not_a_budget():
    with pytest.raises(SpecError, match="requeue.max_preemptions"):
        _resolve(VALID + "requeue: {max_preemptions: true}\n")


def test_a_duplicated_key_is_refused():
    with pytest.raises(SpecError, match=r"name \(line 7\): key given twice"):
        _resolve(VALID + "name: other\n")


def test_mounts_side_by_side_and_in_a_home_are_fine():
    r = _resolve(_spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks: [{name: data, mount: /mnt/data}, {name: more, mount: /mnt/data-2}]
        buckets:
          - {bucket: my-bucket, mount: /home/me/ckpt, only_dir: runs/exp-1}
          - {bucket: my-bucket, mount: /mnt/tpujob-runs}
        run: {command: x}
        """))
    assert [b.only_dir for b in r.spec.buckets] == ["runs/exp-1", None]


def test_on_gcp_a_spec_without_a_project_takes_the_one_of_application_default_credentials(
        monkeypatch, tmp_path):
    import google.auth
    from google.auth.credentials import AnonymousCredentials

    from tpujob.service import jobs
    from tpujob.service.context import Context

    path = tmp_path / "s.yaml"
    path.write_text(VALID)
    monkeypatch.setenv("TPUJOB_CLOUD", "gcp")
    monkeypatch.setattr(google.auth, "default", lambda *a, **k: (AnonymousCredentials(), "adc-project"))
    assert jobs.validate(Context.load(), str(path)).project == "adc-project"
    monkeypatch.setenv("TPUJOB_PROJECT", "named")  # a project set by name wins over ADC's
    assert jobs.validate(Context.load(), str(path)).project == "named"
    monkeypatch.delenv("TPUJOB_PROJECT")
    monkeypatch.setattr(google.auth, "default", lambda *a, **k: (AnonymousCredentials(), None))
    with pytest.raises(SpecError, match="no project"):
        jobs.validate(Context.load(), str(path))


# --- tpu.api: the Cloud TPU API or Compute Engine ----------------------------------------------

def _tpu(acc: str, zone: str, extra: str = "") -> str:
    lines = "".join(f"  {line}\n" for line in extra.splitlines() if line.strip())
    return f"name: demo\ntpu:\n  accelerator: {acc}\n  zone: {zone}\n{lines}run: {{command: x}}\n"


@pytest.mark.parametrize("acc, zone, api", [
    ("v6e-8", "us-east5-b", "tpu-vm"),
    ("v5p-8", "us-east5-a", "tpu-vm"),
    ("v4-8", "us-central2-b", "tpu-vm"),
    ("tpu7x-8", "us-central1-c", "compute"),  # the TPU API does not serve TPU7x
    ("tpu7x-16", "us-central1-ai1a", "compute"),
])
def test_api_auto(acc, zone, api):
    # A multi-host TPU7x is a BULK MIG: flex-start or reservation (bulk-create-instances-in-mig).
    r = _resolve(_tpu(acc, zone, "provisioning: flex-start\nmax_run_duration: 2h" if acc == "tpu7x-16" else ""))
    assert r.spec.tpu.api == "auto"
    assert r.api == api
    assert (r.compute is None) == (api == "tpu-vm")
    # queued resources are the TPU API's: true by default there, false (not refused) on compute
    assert r.spec.tpu.queued is (api == "tpu-vm")


def test_a_tpu_api_job_resolves_as_before():
    r = _resolve(_tpu("v6e-8", "us-east5-b"))
    assert (r.api, r.provisioning, r.reservation, r.max_run_duration_seconds, r.compute) == (
        "tpu-vm", "spot", None, None, None)
    assert r.runtime_version == "v2-alpha-tpuv6e"


def test_compute_carries_what_the_cloud_layer_needs():
    r = _resolve(_tpu("v6e-16", "us-east5-b", "api: compute\nprovisioning: reservation\nreservation: r1"))
    assert r.api == "compute" and r.provisioning == "reservation"
    assert r.compute.model_dump() == {
        "machine_type": "ct6e-standard-4t", "hosts": 4, "chips_per_host": 4, "topology": "4x4",
        "boot_disk_type": "hyperdisk-balanced", "image_family": "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e",
        "image_project": "ubuntu-os-accelerator-images", "boot_disk_gb": 100}
    assert (r.hosts, r.chips) == (4, 16)
    assert r.runtime_version == "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"  # what the VMs boot
    assert r.spec.tpu.queued is False
    assert r.cost_per_hour_usd is None  # a reservation is billed through its commitment


def test_tpu7x_resolves_to_one_vm_of_four_chips():
    r = _resolve(_tpu("tpu7x-8", "us-central1-c"))
    assert (r.generation, r.hosts, r.chips, r.cores) == ("tpu7x", 1, 4, 8)
    assert (r.compute.machine_type, r.compute.topology, r.compute.hosts) == ("tpu7x-standard-4t", "2x2x1", 1)
    assert r.cost_per_hour_usd is None  # no published TPU7x price


@pytest.mark.parametrize("written, seconds", [
    ("24h", 86400), ("86400", 86400), ("'3600'", 3600), ("90m", 5400), ("1d12h", 129600), ("7d", 604800),
    ("3600s", 3600), (604800, 604800),
])
def test_flex_start_run_limit(written, seconds):
    r = _resolve(_tpu("v6e-8", "us-east5-b", f"api: compute\nprovisioning: flex-start\nmax_run_duration: {written}"))
    assert (r.provisioning, r.max_run_duration_seconds) == ("flex-start", seconds)
    assert r.spec.tpu.max_run_duration == seconds
    assert r.cost_per_hour_usd is None  # billed at DWS prices, none published per chip


def test_a_multi_host_flex_start_slice_resolves_on_compute():
    # A BULK MIG made at size 0, then resized to its hosts (tpujob.cloud.compute_tpu).
    r = _resolve(_tpu("v6e-16", "us-east5-b", "api: compute\nprovisioning: flex-start\nmax_run_duration: 2h"))
    assert (r.api, r.provisioning, r.max_run_duration_seconds) == ("compute", "flex-start", 7200)
    assert (r.compute.machine_type, r.compute.topology, r.compute.hosts) == ("ct6e-standard-4t", "4x4", 4)


def test_the_boot_disk_size_is_a_compute_engine_setting():
    # Google's default boot disk is the image's size (AttachedDiskInitializeParams.diskSizeGb).
    assert _resolve(_tpu("tpu7x-8", "us-central1-c", "boot_disk_gb: 500")).compute.boot_disk_gb == 500
    assert _resolve(_tpu("tpu7x-8", "us-central1-c")).compute.boot_disk_gb == 100
    with pytest.raises(SpecError, match="tpu.boot_disk_gb is a Compute Engine setting"):
        _resolve(_tpu("v6e-8", "us-east5-b", "boot_disk_gb: 500"))


@pytest.mark.parametrize("provisioning", ["spot", "on-demand"])
def test_other_compute_vms_may_have_a_run_limit(provisioning):
    # Compute Engine takes maxRunDuration on any VM but a legacy preemptible one (30 s to 120 days).
    r = _resolve(_tpu("v5p-8", "us-east5-a", f"api: compute\nprovisioning: {provisioning}\nmax_run_duration: 120d"))
    assert r.max_run_duration_seconds == 120 * 86400


@pytest.mark.parametrize("name", ["my-res", "projects/my-project/reservations/my-res",
                                  # a project by its number; a block, a sub-block (issue 46; xpk's path)
                                  "projects/123456789012/reservations/my-res",
                                  "my-res/reservationBlocks/my-res-block-0001",
                                  "projects/my-project/reservations/my-res/reservationBlocks/b1/reservationSubBlocks/s1"])
def test_reservation(name):
    r = _resolve(_tpu("tpu7x-16", "us-central1-c", f"provisioning: reservation\nreservation: {name}"))
    assert (r.api, r.provisioning, r.reservation) == ("compute", "reservation", name)
    assert r.compute.hosts == 2 and r.compute.topology == "2x2x2"


def test_queued_false_may_be_said_on_compute():
    r = _resolve(_tpu("v6e-8", "us-east5-b", "api: compute\nqueued: false"))
    assert r.api == "compute" and r.spec.tpu.queued is False


def test_a_compute_fallback_is_checked_on_compute():
    r = _resolve(_tpu("tpu7x-8", "us-central1-c", "fallback: [{accelerator: v6e-8, zone: us-east5-b}]"))
    assert r.api == "compute"


def test_a_stored_spec_from_before_the_api_field_reads_as_a_tpu_api_one():
    from spec_texts import resolved_spec

    r = resolved_spec()  # no api, provisioning or compute keys
    assert (r.api, r.provisioning, r.reservation, r.max_run_duration_seconds, r.compute) == (
        "tpu-vm", "spot", None, None, None)


def test_a_compute_spec_survives_the_store():
    r = _resolve(_tpu("v6e-8", "us-east5-b", "api: compute\nprovisioning: flex-start\nmax_run_duration: 2h"))
    again = spec_mod.ResolvedSpec.model_validate_json(json.dumps(r.to_json_dict()))
    assert again == r
    assert (again.api, again.max_run_duration_seconds, again.compute.machine_type) \
        == ("compute", 7200, "ct6e-standard-8t")


def test_a_compute_engine_attempt_boots_its_image_family_and_keys_its_setup_cache_on_it():
    from tpujob.reconcile.policy import runtime_version

    r = _resolve(_spec("""
        name: demo
        tpu: {accelerator: v6e-8, zone: us-east5-b, api: compute}
        run: {command: python train.py}
        """))
    assert r.api == "compute"
    # What the attempt's request and the setup cache's key read: the image the VM boots.
    assert runtime_version(r, "v6e-8") == "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"
    tpu_api = _resolve(_spec("""
        name: demo
        tpu: {accelerator: v6e-8, zone: us-east5-b}
        run: {command: python train.py}
        """))
    assert runtime_version(tpu_api, "v6e-8") == "v2-alpha-tpuv6e"
