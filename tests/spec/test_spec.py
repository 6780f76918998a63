"""The job spec's refusals: each is exit 2, one `error:` line naming the field and YAML line,
and nothing written (what valid specs resolve to: tests/spec/test_resolution.py)."""

from __future__ import annotations

import re

import pytest
from spec_texts import VALID
from spec_texts import dedent_spec as _spec

# No test here may leave a background emulator behind (checked after every test).
pytestmark = pytest.mark.usefixtures("no_emulator_left")

MARK = "#<"  # the line a refusal must name carries this comment
V4_8 = "{accelerator: v4-8, zone: us-central2-b}"  # most cases' slice, where the slice is not the case


def _job(*lines: str, tpu: str | tuple[str, ...] = V4_8, after: tuple[str, ...] = ()) -> str:
    """A demo job's spec, the case's own lines given: `name: demo`, `tpu: TPU` (a flow mapping, or
    a block of TPU's keys), `lines` (YAML, a line each), `run: {command: x}`, then `after`."""
    head = [f"tpu: {tpu}"] if isinstance(tpu, str) else ["tpu:", *(f"  {key}" for key in tpu)]
    return "".join(f"{line}\n" for line in ("name: demo", *head, *lines, "run: {command: x}", *after))


def _tpu(*keys: str, then: tuple[str, ...] = (), after: tuple[str, ...] = ()) -> str:
    """_job with a tpu block of `keys` (a line each, nested ones indented further), `then` the
    lines before `run`."""
    return _job(*then, tpu=keys, after=after)


def _compute(*keys: str, then: tuple[str, ...] = ()) -> str:
    """_tpu for a v6e-8 in us-east5-b on Compute Engine (`api: compute`), then `keys`."""
    return _tpu("accelerator: v6e-8", "zone: us-east5-b", "api: compute", *keys, then=then)


def _mounted(kind: str, mount: str, after: tuple[str, ...] = ()) -> str:
    """A v4-8 with one disk `data` (`kind` disks) or bucket `my-bucket` (buckets) mounted at
    `mount`, the line marked."""
    item = "name: data" if kind == "disks" else "bucket: my-bucket"
    return _job(f"{kind}:", f"  - {item}", f"    mount: {mount}  {MARK}", after=after)


# (id, spec text, field, message fragment). The expected line is the one marked `#<`, if any.
REFUSALS = [
    ("unknown-top-level-key", _spec("""
        nmae: demo  #<
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        """), "nmae", "unknown key; did you mean 'name'?"),
    ("unknown-nested-key", _tpu("acelerator: v4-8  #<", "zone: us-central2-b"),
     "tpu.acelerator", "unknown key; did you mean 'accelerator'?"),
    ("unknown-key-in-list-item", _job("disks:", "  - name: data", "    mout: /mnt/data  #<"),
     "disks[0].mout", "did you mean 'mount'?"),
    ("unknown-key-in-fallback",
     _tpu("accelerator: v4-8", "zone: us-central2-b", "fallback:", "  - zon: us-central2-a  #<"),
     "tpu.fallback[0].zon", "did you mean 'zone'?"),
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
    ("unknown-generation", _tpu("accelerator: v7-8  #<", "zone: us-central2-b"),
     "tpu.accelerator", "unknown TPU generation 'v7'"),
    ("v4-12-does-not-exist", _tpu("accelerator: v4-12  #<", "zone: us-central2-b"),
     "tpu.accelerator", "v4-12 does not exist"),
    ("v5litepod-3-does-not-exist", _tpu("accelerator: v5litepod-3  #<", "zone: us-west4-a"),
     "tpu.accelerator", "v5litepod-3 does not exist"),
    ("fallback-size-does-not-exist",
     _tpu("accelerator: v4-8", "zone: us-central2-b", "fallback:", "  - accelerator: v4-12  #<"),
     "tpu.fallback[0].accelerator", "v4-12 does not exist"),
    ("read-write-disk-on-multi-host",
     _job("disks:", "  - name: data", "    mode: read-write  #<", "    mount: /mnt/data",
          tpu="{accelerator: v4-16, zone: us-central2-b}"),
     "disks[0].mode", "read-write disk cannot be attached to v4-16 (2 hosts"),
    ("read-write-disk-on-multi-host-fallback",
     _tpu("accelerator: v4-8", "zone: us-central2-b", "fallback: [{accelerator: v4-32}]",
          then=("disks:", "  - name: data", "    mode: read-write  #<", "    mount: /mnt/data")),
     "disks[0].mode", "fallback v4-32"),
    ("pd-standard-on-v5e",
     _job("disks:", "  - name: data", "    type: pd-standard  #<", "    mount: /mnt/data",
          tpu="{accelerator: v5litepod-8, zone: us-west4-a}"),
     "disks[0].type", "'pd-standard' is not allowed on v5e"),
    ("pd-standard-on-v5p",
     _job("disks:", "  - name: data", "    type: pd-standard  #<", "    mount: /mnt/data",
          tpu="{accelerator: v5p-8, zone: us-east5-a}"),
     "disks[0].type", "'pd-standard' is not allowed on v5p"),
    ("pd-balanced-on-v6e",
     _job("disks:", "  - name: data", "    type: pd-balanced  #<", "    mount: /mnt/data",
          tpu="{accelerator: v6e-8, zone: us-east5-b}"),
     "disks[0].type",
        "disk data: type 'pd-balanced' is not allowed on v6e (v6e-8), which takes hyperdisk-ml or "
        "hyperdisk-balanced"),
    ("pd-standard-on-v4",
     _job("disks:", "  - name: master", "    mode: read-write", "    type: pd-standard  #<", "    mount: /mnt/master"),
     "disks[0].type", "disk master: type 'pd-standard' is not allowed on v4 (v4-8), which takes "
        "pd-balanced"),
    ("hyperdisk-ml-on-v4",
     _job("disks:", "  - name: data", "    snapshot: snap", "    type: hyperdisk-ml  #<", "    mount: /mnt/data",
          tpu="{accelerator: v4-32, zone: us-central2-b}"),
     "disks[0].type", "type 'hyperdisk-ml' is not allowed on v4"),
    # Google refuses it: "hyperdisk-balanced disk type cannot be attached in read-only mode."
    # (google/cloud-forensics-utils#530), so a clone for many hosts is never hyperdisk-balanced.
    ("hyperdisk-balanced-read-only",
     _job("disks:", "  - name: data", "    snapshot: snap", "    type: hyperdisk-balanced  #<", "    mount: /mnt/data",
          tpu="{accelerator: v6e-16, zone: us-east5-b}"),
     "disks[0].type", "disk data: hyperdisk-balanced disk type cannot be attached in read-only "
        "mode. (v6e-16); give it type hyperdisk-ml to attach it read-only"),
    # A zonal disk does not move: no empty disk in its place in another zone.
    ("read-write-master-with-fallback-zone",
     _tpu("accelerator: v4-8", "zone: us-central2-b", "fallback:", "  - zone: us-central1-a  #<",
          then=("disks:", "  - name: master", "    mode: read-write", "    mount: /mnt/master")),
     "tpu.fallback[0].zone", "fallback zone us-central1-a: disk master is a read-write master, a "
        "zonal disk in us-central2-b that cannot be attached in us-central1-a; clone it"),
    ("existing-disk-with-fallback-zone",
     _tpu("accelerator: v5litepod-8", "zone: us-west4-a", "fallback: [{zone: us-central1-a}]  #<",
          then=("disks:", "  - name: data", "    mount: /mnt/data")),
     "tpu.fallback[0].zone", "disk data is a read-only disk that is not a clone"),
    # Every attempt uses the disk type resolved on the primary (one clone per job): a v6e fallback
    # cannot take the pd-balanced that v5p defaults to, though v6e's own default would pass.
    ("default-disk-type-refused-by-fallback-generation",
     _tpu("accelerator: v5p-8", "zone: us-east5-a", "fallback: [{accelerator: v6e-8, zone: us-east5-b}]",
          then=("disks:", "  - name: data", "    snapshot: snap", "    mount: /mnt/data")),
     "disks[0].type", "disk data: type 'pd-balanced' is not allowed on v6e (fallback v6e-8)"),
    ("disk-type-refused-by-fallback-generation",
     _tpu("accelerator: v5litepod-8", "zone: us-west4-a", "fallback: [{accelerator: v4-8, zone: us-central2-b}]",
          then=("disks:", "  - name: data", "    snapshot: snap", "    type: hyperdisk-ml  #<",
                "    mount: /mnt/data")),
     "disks[0].type", "fallback v4-8"),
    ("relative-disk-mount", _mounted("disks", "data"), "disks[0].mount", "must be absolute"),
    ("relative-bucket-mount", _mounted("buckets", "ckpt"), "buckets[0].mount", "must be absolute"),
    ("duplicate-mount",
     _job("disks:", "  - name: data", "    mount: /mnt/data", "buckets:", "  - bucket: my-bucket",
          "    mount: /mnt/data/  #<"),
     "buckets[0].mount", "'/mnt/data' is already used by disks[0].mount"),
    ("root-mount", _mounted("buckets", "/"), "buckets[0].mount", "not a usable directory"),
    ("nested-mount",
     _job("disks:", "  - name: data", "    mount: /mnt/a", "buckets:", "  - bucket: my-bucket",
          "    mount: /mnt/a/b  #<"),
     "buckets[0].mount", "'/mnt/a/b' is nested inside disks[0].mount ('/mnt/a')"),
    ("mount-containing-an-earlier-mount",
     _job("disks:", "  - {name: data, mount: /mnt/a/b}", "  - name: more", "    mount: /mnt/a  #<"),
     "disks[1].mount", "'/mnt/a' would contain disks[0].mount ('/mnt/a/b')"),
    ("mount-over-home", _mounted("disks", "/home"), "disks[0].mount", "would hide the system directory /home"),
    ("mount-over-tmp", _mounted("buckets", "/tmp/"), "buckets[0].mount", "would hide the system directory /tmp"),
    ("mount-over-root-home", _mounted("buckets", "//root"), "buckets[0].mount",
     "would hide the system directory /root"),
    ("mount-over-mnt", _mounted("disks", "/mnt"), "disks[0].mount", "would hide the system directory /mnt"),
    ("mount-inside-proc", _mounted("disks", "/proc/data"), "disks[0].mount", "inside the system directory /proc"),
    ("mount-inside-usr", _mounted("buckets", "/usr/local/data"), "buckets[0].mount",
     "inside the system directory /usr"),
    ("mount-over-etc", _mounted("disks", "/etc"), "disks[0].mount", "would hide the system directory /etc"),
    ("mount-at-the-run-dir-mount", _mounted("buckets", "/mnt/tpujob-run", after=("run_dir: gs://my-bucket/runs",)),
     "buckets[0].mount", "collides with /mnt/tpujob-run, where tpujob mounts the run dir"),
    ("mount-inside-the-run-dir-mount", _mounted("disks", "/mnt/tpujob-run/data"), "disks[0].mount",
     "collides with /mnt/tpujob-run"),
    ("only-dir-climbs-out",
     _job("buckets:", "  - bucket: my-bucket", "    mount: /mnt/b", "    only_dir: data/../../other  #<"),
     "buckets[0].only_dir", "no '..'"),
    ("only-dir-absolute", _job("buckets:", "  - bucket: my-bucket", "    mount: /mnt/b", "    only_dir: /data  #<"),
     "buckets[0].only_dir", "no leading '/'"),
    ("invalid-bucket-name", _job("buckets:", "  - bucket: My_Bucket!  #<", "    mount: /mnt/b"),
     "buckets[0].bucket", "not a valid bucket name"),
    ("bucket-with-scheme", _job("buckets:", "  - bucket: gs://my-bucket  #<", "    mount: /mnt/b"),
     "buckets[0].bucket", "without gs://"),
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
    ("invalid-disk-name", _job("disks:", "  - name: Data_Disk  #<", "    mount: /mnt/data"),
     "disks[0].name", "not a valid disk or snapshot name"),
    ("duplicate-disk-name",
     _job("disks:", "  - {name: data, mount: /mnt/a}", "  - name: data  #<", "    mount: /mnt/b"),
     "disks[1].name", "listed twice"),
    ("clone-from-both-sources",
     _job("disks:", "  - name: data  #<", "    source_disk: master", "    snapshot: snap", "    mount: /mnt/data"),
     "disks[0]", "source_disk or snapshot, not both"),
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
    ("negative-preemption-budget", _job(after=("requeue:", "  max_preemptions: -1  #<")),
     "requeue.max_preemptions", "greater than or equal to 0 (got -1)"),
    ("negative-backoff", _job(after=("requeue:", "  backoff_seconds: -5  #<")),
     "requeue.backoff_seconds", "greater than or equal to 0"),
    ("negative-min-run", _job(after=("requeue:", "  min_run_seconds: -1  #<")),
     "requeue.min_run_seconds", "greater than or equal to 0"),
    ("textual-min-run", _job(after=("requeue:", "  min_run_seconds: 10m  #<")),
     "requeue.min_run_seconds", "valid number"),
    ("zero-queue-timeout", _job(after=("requeue:", "  queue_timeout_seconds: 0  #<")),
     "requeue.queue_timeout_seconds", "greater than 0"),
    ("negative-capacity-retries", _job(after=("requeue:", "  max_capacity_retries: -1  #<")),
     "requeue.max_capacity_retries", "greater than or equal to 0"),
    ("textual-setup-timeout", _job(after=("requeue:", "  setup_timeout_seconds: 15m  #<")),
     "requeue.setup_timeout_seconds", "valid number"),
    ("misspelled-timeout-key", _job(after=("requeue:", "  provision_timeout: 60  #<")),
     "requeue.provision_timeout", "did you mean 'provision_timeout_seconds'?"),
    ("non-numeric-budget", _job(after=("requeue:", "  max_nan: lots  #<")), "requeue.max_nan", "valid integer"),
    ("zero-disk-size", _job("disks:", "  - name: data", "    mount: /mnt/data", "    size_gb: 0  #<"),
     "disks[0].size_gb", "greater than 0"),
    ("metadata-ttl-below-minus-one",
     _job("buckets:", "  - bucket: my-bucket", "    mount: /mnt/b", "    metadata_ttl_secs: -2  #<"),
     "buckets[0].metadata_ttl_secs", "greater than or equal to -1"),
    ("unknown-provisioning", _tpu("accelerator: v4-8", "zone: us-central2-b", "provisioning: cheap  #<"),
     "tpu.provisioning", "'spot', 'on-demand', 'preemptible', 'flex-start' or 'reservation'"),
    ("queued-preemptible", _tpu("accelerator: v4-8", "zone: us-central2-b", "provisioning: preemptible  #<"),
     "tpu.provisioning", "queued resources take spot or on-demand"),
    ("bad-zone", _tpu("accelerator: v4-8", "zone: central  #<"), "tpu.zone", "not a zone like us-central2-b"),
    ("no-zone", _job(tpu="{accelerator: v4-8}"), "tpu.zone", "no zone"),
    ("bad-run-dir", _job(after=("run_dir: s3://bucket/x  #<",)), "run_dir", "gs://BUCKET/PATH"),
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
    ("reserved-env-name", _job("env:", "  TPUJOB_HOST_INDEX: 3  #<"), "env.TPUJOB_HOST_INDEX", "set by tpujob itself"),
    ("secret-also-in-env", _job("env: {WANDB_API_KEY: abc}", "secrets:", "  - WANDB_API_KEY  #<"),
     "secrets[0]", "both in env and in secrets"),
    ("notify-unknown-key", _job(after=("notify:", "  - email: me@example.org", "    when: [failed]  #<")),
     "notify[0].when", "unknown key"),
    ("notify-unknown-kind", _job(after=("notify:", "  - email: me@example.org", "    on: [failed, finished]  #<")),
     "notify[0].on[1]", "'succeeded', 'failed', 'preempted', 'nan' or 'cancelled'"),
    ("notify-webhook-not-http", _job(after=("notify:", "  - webhook: ftp://hooks.example.org/s3cr3t  #<")),
     "notify[0].webhook", "must be an http:// or https:// URL, or ${NAME}"),
    ("notify-webhook-and-email",
     _job(after=("notify:", "  - webhook: https://hooks.example.org/x  #<", "    email: me@example.org")),
     "notify[0]", "exactly one of webhook and email"),
    ("notify-bad-email", _job(after=("notify:", "  - email: me-at-example.org  #<")),
     "notify[0].email", "is not an email address"),
    ("notify-kind-twice",
     _job(after=("notify:", "  - email: me@example.org", "    on:", "      - failed", "      - failed  #<")),
     "notify[0].on[1]", "'failed' is listed twice"),
    ("notify-on-empty", _job(after=("notify:", "  - email: me@example.org", "    on: []  #<")),
     "notify[0].on", "on lists nothing"),
    # --- tpu.api, provisioning, reservation, max_run_duration (Compute Engine) ---
    ("unknown-api", _tpu("accelerator: v6e-8", "zone: us-east5-b", "api: gce  #<"),
     "tpu.api", "'auto', 'tpu-vm' or 'compute'"),
    ("tpu-api-on-tpu7x", _tpu("accelerator: tpu7x-8", "zone: us-central1-c", "api: tpu-vm  #<"),
     "tpu.api", "the Cloud TPU API does not serve tpu7x (Google: not supported on TPU7x and later)"),
    ("compute-on-v4", _tpu("accelerator: v4-8", "zone: us-central2-b", "api: compute  #<"),
     "tpu.api", "v4-8: Compute Engine serves TPU v5p, v6e, tpu7x only, not v4"),
    ("compute-on-v5e", _tpu("accelerator: v5litepod-8", "zone: us-west4-a", "api: compute  #<"), "tpu.api", "not v5e"),
    ("flex-start-on-the-tpu-api",
     _tpu("accelerator: v6e-8", "zone: us-east5-b", "provisioning: flex-start  #<", "max_run_duration: 24h"),
     "tpu.provisioning", "provisioning: flex-start is made through Compute Engine: set tpu.api: compute"),
    ("reservation-on-the-tpu-api",
     _tpu("accelerator: v5p-8", "zone: us-east5-a", "api: tpu-vm", "provisioning: reservation  #<",
          "reservation: my-res"),
     "tpu.provisioning", "provisioning: reservation is made through Compute Engine"),
    ("reservation-name-on-the-tpu-api", _tpu("accelerator: v6e-8", "zone: us-east5-b", "reservation: my-res  #<"),
     "tpu.reservation", "tpu.reservation is a Compute Engine setting: set tpu.api: compute"),
    ("max-run-duration-on-the-tpu-api", _tpu("accelerator: v6e-8", "zone: us-east5-b", "max_run_duration: 1h  #<"),
     "tpu.max_run_duration", "tpu.max_run_duration is a Compute Engine setting"),
    ("reservation-without-its-name",
     _compute("provisioning: reservation  #<"),
     "tpu.reservation",
        "provisioning: reservation needs the reservation to consume: set tpu.reservation: NAME"),
    ("reservation-name-without-reservation-provisioning",
     _compute("reservation: my-res  #<"),
     "tpu.reservation", "consumed only with provisioning: reservation (not spot)"),
    ("reservation-bad-name",
     _compute("provisioning: reservation", "reservation: My_Reservation  #<"),
     "tpu.reservation", "'My_Reservation' is not a reservation"),
    ("flex-start-without-a-run-limit",
     _compute("provisioning: flex-start  #<"),
     "tpu.max_run_duration", "provisioning: flex-start needs tpu.max_run_duration"),
    ("flex-start-over-seven-days",
     _tpu("accelerator: tpu7x-8", "zone: us-central1-c", "provisioning: flex-start", "max_run_duration: 8d  #<"),
     "tpu.max_run_duration", "8 days is longer than flex-start allows: flex-start VMs run at most 7 days"),
    ("flex-start-a-second-over-seven-days",
     _compute("provisioning: flex-start", "max_run_duration: 604801  #<"),
     "tpu.max_run_duration", "flex-start VMs run at most 7 days"),
    ("run-limit-beyond-120-days",
     _compute("max_run_duration: 121d  #<"),
     "tpu.max_run_duration", "outside Compute Engine's run time limits (30 s to 120 days)"),
    ("run-limit-below-30-seconds",
     _compute("provisioning: on-demand", "max_run_duration: 10  #<"),
     "tpu.max_run_duration", "10 s is outside Compute Engine's run time limits"),
    ("run-limit-not-a-duration",
     _compute("max_run_duration: soon  #<"),
     "tpu.max_run_duration", "must be a number of seconds or a duration like 24h"),
    ("run-limit-zero", _compute("max_run_duration: 0s  #<"),
     "tpu.max_run_duration", "must be longer than 0 seconds"),
    ("queued-on-compute", _tpu("accelerator: tpu7x-8", "zone: us-central1-c", "queued: true  #<"),
     "tpu.queued",
        "queued resources are a Cloud TPU API feature; the Compute Engine path creates VMs directly"),
    ("multislice-on-compute", _tpu("accelerator: v6e-16", "zone: us-east5-b", "api: compute", "slices: 2  #<"),
     "tpu.slices", "multislice on the Compute Engine path is not supported yet"),
    # "Bulk mode in MIGs is only supported with ... reservation-bound or flex-start" (Google's
    # bulk-create-instances-in-mig): a multi-host spot or on-demand slice is refused, alternatives given.
    ("a-spot-multi-host-compute-slice", _tpu("accelerator: tpu7x-16  #<", "zone: us-central1-c"),
     "tpu.accelerator", "tpu7x-16 is 2 VMs, a BULK managed instance group, which Google allows only with "
                                "flex-start or reservation provisioning (not spot)"),
    ("an-on-demand-multi-host-compute-slice",
     _tpu("accelerator: v6e-16", "zone: us-east5-b", "api: compute", "provisioning: on-demand  #<"),
     "tpu.provisioning", "use provisioning: flex-start (with max_run_duration) or reservation"),
    ("a-read-write-disk-on-a-multi-host-compute-slice",
     _tpu("accelerator: v6e-16", "zone: us-east5-b", "api: compute", "provisioning: flex-start", "max_run_duration: 2h",
          then=("disks:", "  - name: data", "    mode: read-write  #<", "    mount: /mnt/data")),
     "disks[0].mode", "a read-write disk cannot be attached to v6e-16 (4 hosts"),
    ("preemptible-on-compute",
     _tpu("accelerator: v5p-8", "zone: us-east5-a", "api: compute", "provisioning: preemptible  #<"),
     "tpu.provisioning", "legacy preemptible VMs are a TPU API option"),
    ("runtime-version-on-compute",
     _tpu("accelerator: tpu7x-8", "zone: us-central1-c", "runtime_version: v2-alpha-tpuv6e  #<"),
     "tpu.runtime_version", "boots an image (ubuntu-accel-2404-amd64-tpu-tpu7x), not a TPU runtime version"),
    ("fallback-tpu7x-on-the-tpu-api",
     _tpu("accelerator: v6e-8", "zone: us-east5-b", "fallback:", "  - accelerator: tpu7x-8  #<"),
     "tpu.fallback[0].accelerator", "tpu7x-8: the Cloud TPU API does not serve tpu7x"),
    ("fallback-v5e-on-compute",
     _tpu("accelerator: tpu7x-8", "zone: us-central1-c", "fallback:", "  - accelerator: v5litepod-8  #<"),
     "tpu.fallback[0].accelerator", "not v5e (this job's slices are made through Compute Engine)"),
    ("missing-sync-dir", _job("sync: ./no-such-dir  #<"), "sync", "does not exist"),
    # Issue 45: what a host cannot take is refused here, not found on a paid slice. A command
    # runs as one argument of `bash -c`, at most 131,071 bytes (Linux's MAX_ARG_STRLEN).
    ("command-past-one-argument", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run:
          command: %s  #<
        """ % ("x" * 131_072)), "run.command", "the command is 131072 bytes; a host runs at most 131071"),
    ("setup-past-one-argument", _job("setup: %s  #<" % ("y" * 140_000)), "setup", "the command is 140000 bytes"),
    ("env-variable-past-one-argument", _job("env:", "  BIG: %s  #<" % ("z" * 131_068)),
     "env.BIG", "BIG={...} is 131072 bytes; a host takes at most 131071"),
    ("env-past-its-budget", _job(after=("env:  #<", *(f"  V{i}: {'v' * 120_000}" for i in range(9)))),
     "env", "the env is 1080036 bytes in all; tpujob passes at most 1048576"),
    ("workdir-past-path-max", _spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run:
          command: x
          workdir: /%s  #<
        """ % ("w" * 4095)), "run.workdir", "the path is 4096 bytes; a host takes at most 4095 (Linux's PATH_MAX)"),
    # A pattern matches the whole value: `$` also matches before a trailing newline.
    ("name-with-a-trailing-newline", _spec("""
        name: "demo\\n"  #<
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        """), "name", "is not a job name"),
    ("zone-with-a-trailing-newline", _tpu("accelerator: v4-8", 'zone: "us-central2-b\\n"  #<'),
     "tpu.zone", "is not a zone like us-central2-b"),
    ("env-name-with-a-trailing-newline", _job('env: {"STEPS\\n": 1}  #<'),
     "env.STEPS", "is not an environment variable name"),
    ("run-dir-with-a-trailing-newline", _job('run_dir: "gs://bucket/runs\\n"  #<'),
     "run_dir", "must be a gs://BUCKET/PATH location"),
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
