"""The job spec: every refusal is exit 2, one `error:` line naming the field and YAML line, and
nothing written; valid specs resolve with the defaults a researcher expects."""

from __future__ import annotations

import re
import textwrap

import pytest

from tpujob import spec as spec_mod
from tpujob.errors import SpecError

# No test here may leave a background emulator behind (checked after every test).
pytestmark = pytest.mark.usefixtures("no_emulator_left")

VALID = """\
name: demo
tpu:
  accelerator: v4-8
  zone: us-central2-b
run:
  command: python train.py
"""

MARK = "#<"  # the line a refusal must name carries this comment


def _spec(body: str) -> str:
    return textwrap.dedent(body).lstrip("\n")


# (id, spec text, field, message fragment). The expected line is the one marked `#<`, if any.
REFUSALS = [
    ("unknown-top-level-key", _spec("""
        nmae: demo  #<
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        """), "nmae", "unknown key; did you mean 'name'?"),
    ("unknown-nested-key", _spec("""
        name: demo
        tpu:
          acelerator: v4-8  #<
          zone: us-central2-b
        run: {command: x}
        """), "tpu.acelerator", "unknown key; did you mean 'accelerator'?"),
    ("unknown-key-in-list-item", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks:
          - name: data
            mout: /mnt/data  #<
        run: {command: x}
        """), "disks[0].mout", "did you mean 'mount'?"),
    ("unknown-key-in-fallback", _spec("""
        name: demo
        tpu:
          accelerator: v4-8
          zone: us-central2-b
          fallback:
            - zon: us-central2-a  #<
        run: {command: x}
        """), "tpu.fallback[0].zon", "did you mean 'zone'?"),
    ("unknown-key-no-close-match", _spec("""
        name: demo
        flavour: vanilla  #<
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        """), "flavour", "unknown key (known: name, tpu,"),
    ("missing-run", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        """), "run", "required key is missing"),
    ("missing-name", _spec("""
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        """), "name", "required key is missing"),
    ("missing-accelerator", _spec("""
        name: demo
        tpu:  #<
          zone: us-central2-b
        run: {command: x}
        """), "tpu.accelerator", "required key is missing"),
    ("unknown-generation", _spec("""
        name: demo
        tpu:
          accelerator: v7-8  #<
          zone: us-central2-b
        run: {command: x}
        """), "tpu.accelerator", "unknown TPU generation 'v7'"),
    ("v4-12-does-not-exist", _spec("""
        name: demo
        tpu:
          accelerator: v4-12  #<
          zone: us-central2-b
        run: {command: x}
        """), "tpu.accelerator", "v4-12 does not exist"),
    ("v5litepod-3-does-not-exist", _spec("""
        name: demo
        tpu:
          accelerator: v5litepod-3  #<
          zone: us-west4-a
        run: {command: x}
        """), "tpu.accelerator", "v5litepod-3 does not exist"),
    ("fallback-size-does-not-exist", _spec("""
        name: demo
        tpu:
          accelerator: v4-8
          zone: us-central2-b
          fallback:
            - accelerator: v4-12  #<
        run: {command: x}
        """), "tpu.fallback[0].accelerator", "v4-12 does not exist"),
    ("read-write-disk-on-multi-host", _spec("""
        name: demo
        tpu: {accelerator: v4-16, zone: us-central2-b}
        disks:
          - name: data
            mode: read-write  #<
            mount: /mnt/data
        run: {command: x}
        """), "disks[0].mode", "read-write disk cannot be attached to v4-16 (2 hosts"),
    ("read-write-disk-on-multi-host-fallback", _spec("""
        name: demo
        tpu:
          accelerator: v4-8
          zone: us-central2-b
          fallback: [{accelerator: v4-32}]
        disks:
          - name: data
            mode: read-write  #<
            mount: /mnt/data
        run: {command: x}
        """), "disks[0].mode", "fallback v4-32"),
    ("pd-standard-on-v5e", _spec("""
        name: demo
        tpu: {accelerator: v5litepod-8, zone: us-west4-a}
        disks:
          - name: data
            type: pd-standard  #<
            mount: /mnt/data
        run: {command: x}
        """), "disks[0].type", "'pd-standard' is not allowed on v5e"),
    ("pd-standard-on-v5p", _spec("""
        name: demo
        tpu: {accelerator: v5p-8, zone: us-east5-a}
        disks:
          - name: data
            type: pd-standard  #<
            mount: /mnt/data
        run: {command: x}
        """), "disks[0].type", "'pd-standard' is not allowed on v5p"),
    ("pd-balanced-on-v6e", _spec("""
        name: demo
        tpu: {accelerator: v6e-8, zone: us-east5-b}
        disks:
          - name: data
            type: pd-balanced  #<
            mount: /mnt/data
        run: {command: x}
        """), "disks[0].type", "use hyperdisk-ml"),
    ("disk-type-refused-by-fallback-generation", _spec("""
        name: demo
        tpu:
          accelerator: v4-8
          zone: us-central2-b
          fallback: [{accelerator: v5litepod-8}]
        disks:
          - name: data
            type: pd-standard  #<
            mount: /mnt/data
        run: {command: x}
        """), "disks[0].type", "fallback v5litepod-8"),
    ("relative-disk-mount", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks:
          - name: data
            mount: data  #<
        run: {command: x}
        """), "disks[0].mount", "must be absolute"),
    ("relative-bucket-mount", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        buckets:
          - bucket: my-bucket
            mount: ckpt  #<
        run: {command: x}
        """), "buckets[0].mount", "must be absolute"),
    ("duplicate-mount", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks:
          - name: data
            mount: /mnt/data
        buckets:
          - bucket: my-bucket
            mount: /mnt/data/  #<
        run: {command: x}
        """), "buckets[0].mount", "'/mnt/data' is already used by disks[0].mount"),
    ("root-mount", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        buckets:
          - bucket: my-bucket
            mount: /  #<
        run: {command: x}
        """), "buckets[0].mount", "not a usable directory"),
    ("nested-mount", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks:
          - name: data
            mount: /mnt/a
        buckets:
          - bucket: my-bucket
            mount: /mnt/a/b  #<
        run: {command: x}
        """), "buckets[0].mount", "'/mnt/a/b' is nested inside disks[0].mount ('/mnt/a')"),
    ("mount-containing-an-earlier-mount", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks:
          - {name: data, mount: /mnt/a/b}
          - name: more
            mount: /mnt/a  #<
        run: {command: x}
        """), "disks[1].mount", "'/mnt/a' would contain disks[0].mount ('/mnt/a/b')"),
    ("mount-over-home", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks:
          - name: data
            mount: /home  #<
        run: {command: x}
        """), "disks[0].mount", "would hide the system directory /home"),
    ("mount-over-tmp", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        buckets:
          - bucket: my-bucket
            mount: /tmp/  #<
        run: {command: x}
        """), "buckets[0].mount", "would hide the system directory /tmp"),
    ("mount-over-root-home", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        buckets:
          - bucket: my-bucket
            mount: //root  #<
        run: {command: x}
        """), "buckets[0].mount", "would hide the system directory /root"),
    ("mount-over-mnt", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks:
          - name: data
            mount: /mnt  #<
        run: {command: x}
        """), "disks[0].mount", "would hide the system directory /mnt"),
    ("mount-inside-proc", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks:
          - name: data
            mount: /proc/data  #<
        run: {command: x}
        """), "disks[0].mount", "inside the system directory /proc"),
    ("mount-inside-usr", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        buckets:
          - bucket: my-bucket
            mount: /usr/local/data  #<
        run: {command: x}
        """), "buckets[0].mount", "inside the system directory /usr"),
    ("mount-over-etc", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks:
          - name: data
            mount: /etc  #<
        run: {command: x}
        """), "disks[0].mount", "would hide the system directory /etc"),
    ("mount-at-the-run-dir-mount", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        buckets:
          - bucket: my-bucket
            mount: /mnt/tpujob-run  #<
        run: {command: x}
        run_dir: gs://my-bucket/runs
        """), "buckets[0].mount", "collides with /mnt/tpujob-run, where tpujob mounts the run dir"),
    ("mount-inside-the-run-dir-mount", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks:
          - name: data
            mount: /mnt/tpujob-run/data  #<
        run: {command: x}
        """), "disks[0].mount", "collides with /mnt/tpujob-run"),
    ("only-dir-climbs-out", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        buckets:
          - bucket: my-bucket
            mount: /mnt/b
            only_dir: data/../../other  #<
        run: {command: x}
        """), "buckets[0].only_dir", "no '..'"),
    ("only-dir-absolute", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        buckets:
          - bucket: my-bucket
            mount: /mnt/b
            only_dir: /data  #<
        run: {command: x}
        """), "buckets[0].only_dir", "no leading '/'"),
    ("invalid-bucket-name", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        buckets:
          - bucket: My_Bucket!  #<
            mount: /mnt/b
        run: {command: x}
        """), "buckets[0].bucket", "not a valid bucket name"),
    ("bucket-with-scheme", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        buckets:
          - bucket: gs://my-bucket  #<
            mount: /mnt/b
        run: {command: x}
        """), "buckets[0].bucket", "without gs://"),
    ("invalid-job-name", _spec("""
        name: My Job  #<
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        """), "name", "is not a job name"),
    ("job-name-too-long", _spec(f"""
        name: {"a" * 41}  #<
        tpu: {{accelerator: v4-8, zone: us-central2-b}}
        run: {{command: x}}
        """), "name", "at most 40 characters"),
    ("invalid-disk-name", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks:
          - name: Data_Disk  #<
            mount: /mnt/data
        run: {command: x}
        """), "disks[0].name", "not a valid disk or snapshot name"),
    ("duplicate-disk-name", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks:
          - {name: data, mount: /mnt/a}
          - name: data  #<
            mount: /mnt/b
        run: {command: x}
        """), "disks[1].name", "listed twice"),
    ("clone-from-both-sources", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks:
          - name: data  #<
            source_disk: master
            snapshot: snap
            mount: /mnt/data
        run: {command: x}
        """), "disks[0]", "source_disk or snapshot, not both"),
    ("run-command-and-runtime", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run:  #<
          command: python train.py
          runtime: {preset: tiny}
        """), "run", "exactly one of run.command and run.runtime"),
    ("run-neither", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run:  #<
          workdir: /home/me
        """), "run", "exactly one of run.command and run.runtime"),
    ("negative-preemption-budget", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        requeue:
          max_preemptions: -1  #<
        """), "requeue.max_preemptions", "greater than or equal to 0 (got -1)"),
    ("negative-backoff", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        requeue:
          backoff_seconds: -5  #<
        """), "requeue.backoff_seconds", "greater than or equal to 0"),
    ("zero-queue-timeout", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        requeue:
          queue_timeout_seconds: 0  #<
        """), "requeue.queue_timeout_seconds", "greater than 0"),
    ("negative-capacity-retries", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        requeue:
          max_capacity_retries: -1  #<
        """), "requeue.max_capacity_retries", "greater than or equal to 0"),
    ("textual-setup-timeout", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        requeue:
          setup_timeout_seconds: 15m  #<
        """), "requeue.setup_timeout_seconds", "valid number"),
    ("misspelled-timeout-key", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        requeue:
          provision_timeout: 60  #<
        """), "requeue.provision_timeout", "did you mean 'provision_timeout_seconds'?"),
    ("non-numeric-budget", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        requeue:
          max_nan: lots  #<
        """), "requeue.max_nan", "valid integer"),
    ("zero-disk-size", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        disks:
          - name: data
            mount: /mnt/data
            size_gb: 0  #<
        run: {command: x}
        """), "disks[0].size_gb", "greater than 0"),
    ("metadata-ttl-below-minus-one", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        buckets:
          - bucket: my-bucket
            mount: /mnt/b
            metadata_ttl_secs: -2  #<
        run: {command: x}
        """), "buckets[0].metadata_ttl_secs", "greater than or equal to -1"),
    ("unknown-provisioning", _spec("""
        name: demo
        tpu:
          accelerator: v4-8
          zone: us-central2-b
          provisioning: cheap  #<
        run: {command: x}
        """), "tpu.provisioning", "'spot', 'on-demand' or 'preemptible'"),
    ("queued-preemptible", _spec("""
        name: demo
        tpu:
          accelerator: v4-8
          zone: us-central2-b
          provisioning: preemptible  #<
        run: {command: x}
        """), "tpu.provisioning", "queued resources take spot or on-demand"),
    ("bad-zone", _spec("""
        name: demo
        tpu:
          accelerator: v4-8
          zone: central  #<
        run: {command: x}
        """), "tpu.zone", "not a zone like us-central2-b"),
    ("no-zone", _spec("""
        name: demo
        tpu: {accelerator: v4-8}
        run: {command: x}
        """), "tpu.zone", "no zone"),
    ("bad-run-dir", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        run_dir: s3://bucket/x  #<
        """), "run_dir", "gs://BUCKET/PATH"),
    ("multi-host-runtime-without-shared-run-dir", _spec("""
        name: demo
        tpu: {accelerator: v4-16, zone: us-central2-b}
        run: {runtime: {model: tiny}}
        """), "run_dir", "needs a run dir shared by every host"),
    ("fallback-multi-host-runtime-without-shared-run-dir", _spec("""
        name: demo
        tpu:
          accelerator: v4-8
          zone: us-central2-b
          fallback: [{accelerator: v5litepod-16}]
        run: {runtime: {model: tiny}}
        """), "run_dir", "v5litepod-16 (4 hosts)"),
    ("reserved-env-name", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        env:
          TPUJOB_HOST_INDEX: 3  #<
        run: {command: x}
        """), "env.TPUJOB_HOST_INDEX", "set by tpujob itself"),
    ("secret-also-in-env", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        env: {WANDB_API_KEY: abc}
        secrets:
          - WANDB_API_KEY  #<
        run: {command: x}
        """), "secrets[0]", "both in env and in secrets"),
    ("missing-sync-dir", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        sync: ./no-such-dir  #<
        run: {command: x}
        """), "sync", "does not exist"),
]


def _marked_line(text: str) -> int | None:
    lines = [i for i, line in enumerate(text.splitlines(), 1) if MARK in line]
    assert len(lines) <= 1
    return lines[0] if lines else None


@pytest.mark.parametrize("command", ["validate", "create"])
@pytest.mark.parametrize("text, field, fragment", [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS])
def test_refusal(cli, spec_file, stored_jobs, command, text, field, fragment):
    if command == "create":
        # A store that already holds a job: a refused create must leave it exactly as it was.
        # Seeded through the service layer (what `create` records), not a real `create`, which
        # would start a background emulator in this test's home for every case.
        from tpujob.service import jobs
        from tpujob.service.context import Context

        jobs.record(Context.load(), str(spec_file(VALID)))
        assert stored_jobs() == 1
    before = stored_jobs()
    result = cli(command, spec_file(text))
    assert result.code == 2, result
    line = _marked_line(text)
    where = f"{field} (line {line})" if line else field
    error = result.error_line
    assert error.startswith(f"error: {where}: "), error
    assert fragment in error, error
    assert stored_jobs() == before
    assert result.out == ""


@pytest.mark.parametrize("command", ["validate", "create", "create --dry-run"])
def test_yaml_syntax_error_names_the_line(cli, spec_file, stored_jobs, command):
    path = spec_file("name: demo\ntpu:\n  accelerator: [v4-8\n  zone: us-central2-b\nrun: {command: x}\n")
    result = cli(*command.split(), path)
    assert result.code == 2
    assert re.match(rf"error: {re.escape(str(path))}: invalid YAML \(line \d+\): ", result.error_line)
    assert stored_jobs() == 0


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n"])
def test_a_spec_is_a_mapping(cli, spec_file, stored_jobs, text):
    result = cli("create", spec_file(text))
    assert result.code == 2
    assert "a job spec is a YAML mapping" in result.error_line
    assert stored_jobs() == 0


def test_missing_spec_file(cli, tmp_path, stored_jobs):
    result = cli("create", tmp_path / "nope.yaml")
    assert result.code == 2
    assert "no such file" in result.error_line
    assert stored_jobs() == 0


def test_every_refusal_id_is_unique():
    ids = [c[0] for c in REFUSALS]
    assert len(ids) == len(set(ids))


# --- what valid specs resolve to ----------------------------------------------------------------

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
        disks: [{name: master, mode: read-write, mount: /mnt/master, type: pd-standard}]
        run: {command: x}
        """))
    assert r.hosts == 1 and r.disk_types == {"master": "pd-standard"}


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
    from tpujob.reconcile.sweep import policy_of

    defaults = policy_of(_resolve(VALID).to_json_dict())
    assert (defaults.queue_timeout_seconds, defaults.provision_timeout_seconds, defaults.setup_timeout_seconds,
            defaults.unhealthy_grace_seconds, defaults.max_capacity_retries) == (21600, 1800, 900, 120, 48)
    tuned = policy_of(_resolve(VALID + _spec("""
        requeue:
          queue_timeout_seconds: 7200
          provision_timeout_seconds: 600
          setup_timeout_seconds: 1200.5
          unhealthy_grace_seconds: 30
          max_capacity_retries: 5
        """)).to_json_dict())
    assert (tuned.queue_timeout_seconds, tuned.provision_timeout_seconds, tuned.setup_timeout_seconds,
            tuned.unhealthy_grace_seconds, tuned.max_capacity_retries) == (7200, 600, 1200.5, 30, 5)


def test_a_job_recorded_before_the_new_keys_gets_their_defaults():
    from tpujob.reconcile.sweep import policy_of

    old = _resolve(VALID).to_json_dict()
    old["spec"]["requeue"] = {"max_preemptions": 4, "max_failures": 1, "max_nan": 2, "backoff_seconds": 5.0}
    policy = policy_of(old)
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


def test_the_reserved_run_dir_mount_is_where_storage_mounts_it():
    from tpujob.service import storage

    assert spec_mod.RUN_DIR_MOUNT == storage.RUN_DIR_MOUNT


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
