"""The storage parts of a spec as `validate` and `create --dry-run` show them: the file cache of a
bucket, the job's own clone names."""

from __future__ import annotations

import json

SPEC = """\
name: j
tpu: {{accelerator: v4-8, zone: us-central2-b, project: p}}
run: {{command: "true"}}
{extra}
"""


def test_the_file_cache_is_part_of_a_bucket(cli, spec_file):
    ok = cli("validate", "--json", spec_file(SPEC.format(extra="buckets: [{bucket: data-set, mount: /mnt/ds, "
                                                         "cache_dir: /tmp/c, file_cache_max_size_mb: 512}]")))
    assert ok.code == 0, ok.err
    bucket = json.loads(ok.out)["spec"]["buckets"][0]
    assert (bucket["cache_dir"], bucket["file_cache_max_size_mb"]) == ("/tmp/c", 512)

    no_dir = cli("validate", spec_file(SPEC.format(
        extra="buckets: [{bucket: data-set, mount: /mnt/ds, file_cache_max_size_mb: 512}]")))
    assert no_dir.code == 2
    assert "buckets[0]" in no_dir.error_line and "file_cache_max_size_mb needs cache_dir" in no_dir.error_line
    relative = cli("validate",
                   spec_file(SPEC.format(extra="buckets: [{bucket: data-set, mount: /mnt/ds, cache_dir: c}]")))
    assert relative.code == 2 and "buckets[0].cache_dir" in relative.error_line
    assert "value error" not in relative.error_line


def test_a_clone_is_named_after_its_job(cli, spec_file, local_cloud):
    from tpujob.clients import make_compute
    from tpujob.service.context import Context

    compute = make_compute(Context.load().settings)  # the clone's snapshot must exist (create checks)
    compute.create_disk("p", "us-central2-b", "seed", disk_type="pd-balanced", size_gb=10)
    compute.create_snapshot("p", "us-central2-b", "seed", "s")
    long_name = "d" * 46  # its snapshot would be d...d-src-TAG-JOBID: 64 characters
    refused = cli("validate", spec_file(SPEC.format(
        extra=f"disks: [{{name: {long_name}, snapshot: s, mount: /mnt/d}}]")))
    assert refused.code == 2 and "at most 45 characters" in refused.error_line
    assert cli("validate", spec_file(SPEC.format(
        extra=f"disks: [{{name: {long_name[:45]}, snapshot: s, mount: /mnt/d}}]"))).code == 0
    plan = cli("create", "--dry-run", "--json", spec_file(SPEC.format(
        extra="disks: [{name: data, snapshot: s, mount: /mnt/d}, {name: master, mode: read-write, mount: /mnt/m}]")))
    assert plan.code == 0, plan.err
    steps = [(s["action"], s["resource"]) for s in json.loads(plan.out)]
    # The store's tag (6 hex digits, tpujob/names.py) shown SSSSSS: a dry run opens no store.
    assert ("create disk", "data-SSSSSS-NNNNNN") in steps and ("attach", "data-SSSSSS-NNNNNN") in steps
    assert ("attach", "master") in steps  # a master is shared, not the job's
