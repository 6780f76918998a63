"""Disks as Google takes them, end to end with the CLI against the emulator: a read-only
hyperdisk-balanced is refused before anything is spent (Google's wording), a fallback zone a
zonal disk cannot follow is refused, and a clone follows the job to a fallback zone from the
global snapshot."""

from __future__ import annotations

import json

import pytest
from reconcile_helpers import FALLBACK_ZONE, V5E, ZONE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

GOOGLE = "hyperdisk-balanced disk type cannot be attached in read-only mode."  # cloud-forensics-utils#530


def _write(tmp_path, name, text):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def test_disks_google_would_refuse_are_refused_at_validate_and_create(cli, tmp_path, stored_jobs, local_cloud):
    balanced = _write(tmp_path, "balanced", """\
name: hb
tpu: {accelerator: v6e-16, zone: us-east5-b, queued: false}
disks:
  - {name: data, snapshot: snap, mode: read-only, mount: /mnt/data, type: hyperdisk-balanced}
run: {command: "true"}
""")
    moved = _write(tmp_path, "moved", f"""\
name: rw
tpu:
  accelerator: v4-8
  zone: {ZONE}
  queued: false
  fallback: [{{zone: us-central1-a}}]
disks:
  - {{name: master, mode: read-write, mount: /mnt/master}}
run: {{command: "true"}}
""")
    for verb in ("validate", "create"):
        refused = cli(verb, balanced)
        assert refused.code == 2, refused.out
        assert GOOGLE in refused.error_line and "disks[0].type" in refused.error_line
        refused = cli(verb, moved)
        assert refused.code == 2, refused.out
        assert ("fallback zone us-central1-a: disk master is a read-write master, a zonal disk in "
                f"{ZONE} that cannot be attached in us-central1-a") in refused.error_line
    assert stored_jobs() == 0
    by_hand = cli("disk", "clone", "snap", "--type", "hyperdisk-balanced", "--zone", "us-east5-b")
    assert by_hand.code == 2 and GOOGLE in by_hand.error_line


def test_a_clone_follows_the_job_to_a_fallback_zone_from_the_snapshot(cli, local_cloud, tmp_path, project):
    # The master lives in ZONE; v5e is not offered there, so the job runs in the fallback zone,
    # on a clone made there from the (global) snapshot of the master.
    from tpujob.clients import make_compute
    from tpujob.service.context import Context

    compute = make_compute(Context.load().settings)
    compute.create_disk(project, ZONE, "master", disk_type="pd-balanced", size_gb=10)
    spec = _write(tmp_path, "follow", f"""\
name: follow
tpu:
  accelerator: {V5E}
  zone: {ZONE}
  queued: false
  fallback: [{{zone: {FALLBACK_ZONE}}}]
disks:
  - {{name: data, source_disk: master, mode: read-only, mount: /mnt/data}}
run: {{command: "ls /mnt/data > /dev/null && sleep 600"}}
""")
    result = cli("create", spec)
    assert result.code == 0, result.err
    for _ in range(30):
        shown = json.loads(cli("show", "--json", "follow").out)
        if shown["state"] == "RUNNING":
            break
        cli("requeue")
    assert shown["state"] == "RUNNING", shown["events"]
    assert [(a["zone"], a["end_reason"]) for a in shown["attempts"]] == [(ZONE, "unavailable"), (FALLBACK_ZONE, None)]
    from tpujob.names import clone_name, snapshot_name

    tag, job_id = Context.load().store.store_tag, int(shown["id"])
    clone = compute.get_disk(project, FALLBACK_ZONE, clone_name("data", job_id, tag))
    assert clone.source_snapshot == snapshot_name("data", job_id, tag)  # not an empty disk
    assert compute.get_snapshot(project, snapshot_name("data", job_id, tag)).source_disk == "master"
    assert clone.users == (shown["attempts"][-1]["slice_name"],)
    assert compute.find_disk(project, FALLBACK_ZONE, "master") is None
    assert cli("delete", "follow").code == 0
    compute.delete_disk(project, ZONE, "master")
