"""The setup cache end to end (issue 26): a 20-second setup that builds a cached path runs once
across three attempts on new slices, later ones unpack it in seconds; a failing setup still
says why; `tpujob cache list|clear` shows and deletes the archives."""

from __future__ import annotations

import json
import uuid

import pytest
from reconcile_helpers import ZONE, host_root, named_bucket, node_ref, reconciler, sweep_until

pytestmark = pytest.mark.slow

BUCKET = "setup-cache-tests"
SPEC = """\
name: {name}
tpu: {{accelerator: v4-8, zone: {zone}, queued: false}}
run_dir: gs://{bucket}/{token}
requeue: {{backoff_seconds: 0, min_run_seconds: 0, max_preemptions: 5}}
setup:
  run: |
    # {token}: the emulator's bucket outlives each test, and with it the cache
    sleep {sleep}
    mkdir -p ~/venv && echo "built by attempt $TPUJOB_ATTEMPT" > ~/venv/marker
    touch "$TPUJOB_RUN_DIR/setup-ran-$TPUJOB_ATTEMPT"
    {extra}
  cache: [venv]
run:
  command: cp ~/venv/marker /mnt/marker; sleep 600
"""


@pytest.fixture
def bucket(local_cloud):
    return named_bucket(BUCKET)


def record(ctx, tmp_path, *, sleep=20, extra="true"):
    from tpujob.service import jobs

    token = uuid.uuid4().hex[:8]
    path = tmp_path / f"cached-{token}.yaml"
    path.write_text(SPEC.format(name="cached", zone=ZONE, bucket=BUCKET, token=token, sleep=sleep, extra=extra))
    return jobs.record(ctx, str(path))[0], token


def setup_seconds(ctx, job_id: int) -> list[tuple[float, str]]:
    """Per attempt: (seconds from the slice READY to setup done on every host, that event's words)."""
    out, ready = [], None
    for event in ctx.store.events(job_id):
        if event.to_state == "SETTING_UP":
            ready = event.at
        elif event.kind == "setup" and event.message.startswith("setup done") and ready is not None:
            out.append((event.at - ready, event.message))
            ready = None
    return out


@pytest.mark.timeout(600)  # three attempts: about 1.5 min here
def test_a_cached_setup_runs_once_across_three_attempts_on_new_slices(ctx, local_cloud, project, bucket, tmp_path,
                                                                       cli):
    job, token = record(ctx, tmp_path)
    rec = reconciler(ctx)
    setups = []  # each attempt's setup on its host: from its start (setup.pid) to its marker (setup.done)
    for number in (1, 2, 3):
        if number > 1:
            local_cloud.preempt(node_ref(project, ZONE, ctx.store.current_attempt(job.id).slice_name))
        job = sweep_until(ctx, job.id, lambda j, number=number: j.state == "RUNNING" and j.attempt == number,
                          rec=rec, timeout=180, pause=0.5)
        root = host_root(local_cloud, project, ZONE, ctx.store.current_attempt(job.id).slice_name, 0)
        marker = root / "mnt/marker"
        sweep_until(ctx, job.id, lambda j, marker=marker: marker.exists(), rec=rec, timeout=30)
        assert marker.read_text() == "built by attempt 1\n"  # attempt 1's setup, unpacked on a new host
        files = root / f"home/tpujob/.tpujob/jobs/{job.id:06d}/attempt-{number}"
        setups.append((files / "setup.done").stat().st_mtime - (files / "setup.pid").stat().st_mtime)
    assert setups[0] >= 20 and setups[1] < 3 and setups[2] < 3, setups
    ran = sorted(b.name.rsplit("/", 1)[1] for b in bucket.list_blobs(prefix=f"{token}/"))
    assert [name for name in ran if name.startswith("setup-ran")] == ["setup-ran-1"]  # once
    took = setup_seconds(ctx, job.id)
    assert len(took) == 3, took
    assert took[0][0] >= 20 and "miss on 1 of 1 hosts (host 0: no archive under this key yet)" in took[0][1]
    assert "stored by host 0" in took[0][1]
    for seconds, words in took[1:]:
        assert seconds < 20, took  # READY to setup done (mounts included): never the setup's 20 s again
        assert "setup cache: hit on 1 of 1 hosts (unpacked in" in words
    assert [a.end_reason for a in ctx.store.attempts(job.id)] == ["preempted", "preempted", None]
    shown = cli("show", "--json", str(job.id))
    assert shown.code == 0, shown.err
    assert [a["setup_cache"] for a in json.loads(shown.out)["attempts"]] == ["miss", "hit", "hit"]
    table = cli("show", str(job.id)).out.split("attempts:")[1].split("\n\n")[0].splitlines()
    rows = [row for row in table[2:] if row[:1].isdigit()]  # not the causes printed under the table
    assert table[1].split()[-1] == "SETUP" and [row.split()[-1] for row in rows] == ["miss", "hit", "hit"]


def test_a_failing_cached_setup_says_why_and_stores_nothing(ctx, local_cloud, project, bucket, tmp_path, cli):
    job, token = record(ctx, tmp_path, sleep=3, extra="echo 'pip: no matching distribution' >&2; exit 7")
    job = sweep_until(ctx, job.id, lambda j: j.state == "FAILED", timeout=120, pause=0.5)
    assert job.end_reason == "setup_failed"
    said = [e.message for e in ctx.store.events(job.id) if e.message.startswith("setup failed")]
    assert said and said[0].startswith("setup failed: setup on host 0: exit code 7: ")
    assert "pip: no matching distribution | tpujob: the job's setup command exited 7" in said[0]
    listed = cli("cache", "list", "--json", "--bucket", BUCKET)
    assert listed.code == 0, listed.err
    setup_keys = {row["key"] for row in json.loads(listed.out)}
    from tpujob.attempt import setup_cache
    from tpujob.spec.stored import spec_of

    assert setup_cache.key(spec_of(job), job.accelerator) not in setup_keys


def test_cache_list_and_clear(ctx, local_cloud, project, bucket, tmp_path, cli):
    job, _ = record(ctx, tmp_path, sleep=0)
    sweep_until(ctx, job.id, lambda j: j.state == "RUNNING", timeout=120, pause=0.5)
    from tpujob.attempt import setup_cache
    from tpujob.spec.stored import spec_of

    key = setup_cache.key(spec_of(ctx.store.get(job.id)), job.accelerator)
    listed = cli("cache", "list", "--json")
    assert listed.code == 0, listed.err
    [row] = [r for r in json.loads(listed.out) if r["key"] == key]
    assert row["url"].startswith(f"gs://{BUCKET}/tpujob-cache/{key}.tar.") and row["size_bytes"] > 0
    table = cli("cache", "list")
    assert key in table.out and f"gs://{BUCKET}/tpujob-cache/{key}" in table.out
    cleared = cli("cache", "clear", key)
    assert cleared.code == 0, cleared.err
    assert cleared.out.splitlines()[-1] == "1 setup archive deleted"
    assert key not in cli("cache", "list").out
    assert not [b for b in bucket.list_blobs(prefix=f"tpujob-cache/{key}")]


def _planting_archive() -> bytes:
    """What someone who can write the bucket might store in the archive's place: a tar.gz
    that plants a venv of its own and a file outside it."""
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, body in (("home/tpujob/venv/marker", b"planted\n"), ("mnt/pwned", b"ran\n")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return out.getvalue()


@pytest.mark.timeout(300)
def test_a_replaced_archive_is_refused_and_the_setup_runs(ctx, local_cloud, project, bucket, tmp_path):
    """Issue 45: the archive is unpacked at / on later hosts. One replaced in the bucket since
    host 0 stored it no longer matches the sha256 recorded then: refused, in words, the setup
    runs again, and host 0 stores a new archive whose digest the store keeps."""
    import hashlib

    from tpujob.attempt import setup_cache
    from tpujob.spec.stored import spec_of

    job, token = record(ctx, tmp_path, sleep=0)
    rec = reconciler(ctx)
    job = sweep_until(ctx, job.id, lambda j: j.state == "RUNNING", rec=rec, timeout=120, pause=0.5)
    key = setup_cache.key(spec_of(job), job.accelerator)
    [stored] = list(bucket.list_blobs(prefix=f"tpujob-cache/{key}.tar."))
    recorded = ctx.store.setup_cache_digest(BUCKET, key)
    assert recorded == hashlib.sha256(stored.download_as_bytes()).hexdigest()  # host 0's report, kept
    stored.delete()
    bucket.blob(f"tpujob-cache/{key}.tar.gz").upload_from_string(_planting_archive())

    local_cloud.preempt(node_ref(project, ZONE, ctx.store.current_attempt(job.id).slice_name))
    job = sweep_until(ctx, job.id, lambda j: j.state == "RUNNING" and j.attempt == 2, rec=rec, timeout=180,
                      pause=0.5)
    root = host_root(local_cloud, project, ZONE, ctx.store.current_attempt(job.id).slice_name, 0)
    marker = root / "mnt/marker"
    sweep_until(ctx, job.id, lambda j: marker.exists(), rec=rec, timeout=30)
    assert marker.read_text() == "built by attempt 2\n" and not (root / "mnt/pwned").exists()
    [words] = [e.message for e in ctx.store.events(job.id) if e.message.startswith("setup done")][1:]
    assert ("setup cache: miss on 1 of 1 hosts (host 0: the archive was refused: its sha256 is not the one "
            "recorded when it was stored): the setup ran; stored by host 0") in words
    [again] = list(bucket.list_blobs(prefix=f"tpujob-cache/{key}.tar."))
    assert ctx.store.setup_cache_digest(BUCKET, key) == hashlib.sha256(again.download_as_bytes()).hexdigest()
    assert ctx.store.setup_cache_digest(BUCKET, key) != recorded
