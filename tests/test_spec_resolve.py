"""What valid job specs resolve to: the defaults a researcher expects, per generation and from
the settings, and the requeue policy the sweep reads."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from spec_texts import VALID, dedent_spec as _spec
from tpujob import spec as spec_mod
from tpujob.errors import SpecError

pytestmark = pytest.mark.usefixtures("no_emulator_left")


def _resolve(text: str, **kwargs):
    spec, lines = spec_mod.parse(text)
    return spec_mod.resolve(spec, lines, **{"default_project": "p", **kwargs})


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
    r = _resolve(_spec(f"""
        name: demo
        tpu: {{accelerator: {acc}, zone: {zone}}}
        disks: [{{name: data, snapshot: snap, mount: /mnt/data}}]
        run: {{command: x}}
        """))
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
    # hyperdisk-balanced is never read-only (test_spec.py): a master on one host.
    ("v6e-8", "us-east5-b", "hyperdisk-balanced", "mode: read-write"),
])
def test_the_generations_other_disk_types_are_taken(acc, zone, disk_type, source):
    r = _resolve(_spec(f"""
        name: demo
        tpu: {{accelerator: {acc}, zone: {zone}}}
        disks: [{{name: data, {source}, mount: /mnt/data, type: {disk_type}}}]
        run: {{command: x}}
        """))
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

    resolved, _ = spec_mod.load(Path(__file__).resolve().parents[1] / "jobs.example.yaml", default_project="p")
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

    from tpujob.job_spec import spec_of

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
