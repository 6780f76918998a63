"""Host preparation on a fresh TPU VM, end to end against the emulator: its unattended-upgrades
holds the dpkg frontend lock for a while after boot (emulator/machines/apt.py). Installing gcsfuse for a
bucket mount waits for it; an apt-get that does not wait fails as apt does; gcsfuse already on
the image is not installed again."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

APT_SAYS = "Could not get lock /var/lib/dpkg/lock-frontend. It is held by process "

BUCKET_JOB = """\
name: {name}
tpu: {{accelerator: v4-8, zone: us-central2-b, queued: false}}
buckets:
  - {{bucket: {bucket}, mount: /mnt/data}}
run:
  command: "ls /mnt/data > /dev/null && sleep 600"
"""
APT_JOB = """\
name: {name}
tpu: {{accelerator: v4-8, zone: us-central2-b, queued: false}}
setup: "apt-get install -y -q gcsfuse"
run:
  command: "sleep 600"
"""


@pytest.fixture
def fresh_image(cli, local_cloud):
    """Hosts of nodes created in the test boot with the lock held this long (and, if asked,
    without gcsfuse): `tpujob emulator image`; the emulator's image as it was afterwards."""
    before = local_cloud.image()

    def boot(seconds: float, gcsfuse: bool) -> None:
        said = cli("emulator", "image", "--apt-lock-seconds", seconds,
                   "--with-gcsfuse" if gcsfuse else "--without-gcsfuse")
        assert said.code == 0, said.err
        assert said.out == (f"hosts boot with the dpkg lock held {seconds:g} s, gcsfuse "
                            f"{'installed' if gcsfuse else 'not installed'}\n")

    yield boot
    local_cloud.image(apt_lock_seconds=before["aptLockSeconds"], gcsfuse=before["gcsfuse"])


def _show(cli, name) -> dict:
    result = cli("show", "--json", name)
    assert result.code == 0, result.err
    return json.loads(result.out)


def _host_log(tpujob_home, job_id) -> str:
    return "".join(p.read_text() for p in (tpujob_home / "logs").rglob("host-0.log") if f"/{job_id}/" in str(p))


def _bucket(name):
    from tpujob.clients import make_storage
    from tpujob.service.context import Context

    gcs = make_storage(Context.load().settings)
    if gcs.lookup_bucket(name) is None:
        gcs.create_bucket(name)
    return name


def test_installing_gcsfuse_waits_for_the_apt_lock(cli, fresh_image, tmp_path, tpujob_home):
    fresh_image(20, gcsfuse=False)
    spec = tmp_path / "fresh.yaml"
    spec.write_text(BUCKET_JOB.format(name="fresh", bucket=_bucket(f"fresh-{os.getpid()}")))
    result = cli("create", spec)
    assert result.code == 0, result.err
    job = _show(cli, "fresh")
    assert job["state"] == "RUNNING", "\n".join(e["message"] for e in job["events"])
    said = _host_log(tpujob_home, job["id"])
    assert f"Waiting for cache lock: {APT_SAYS}" in said and "(unattended-upgr)" in said
    assert "Setting up gcsfuse" in said and "tpujob: mounted gs://" in said
    assert cli("delete", "fresh").code == 0


def test_an_apt_get_that_does_not_wait_fails_as_apt_does(cli, fresh_image, tmp_path):
    fresh_image(60, gcsfuse=False)
    spec = tmp_path / "hasty.yaml"
    spec.write_text(APT_JOB.format(name="hasty"))
    result = cli("create", spec)
    assert "tpujob: the job's setup command exited 100" in result.err
    job = _show(cli, "hasty")
    assert (job["state"], job["end_reason"]) == ("FAILED", "setup_failed")
    failed = [e["message"] for e in job["events"] if e["message"].startswith("setup failed:")]
    assert failed and f"E: {APT_SAYS}" in failed[-1] and "(unattended-upgr)" in failed[-1]
    assert "exit code 100" in failed[-1]
    assert cli("delete", "hasty").code == 0


def test_gcsfuse_on_the_image_is_not_installed_again(cli, fresh_image, tmp_path, tpujob_home):
    fresh_image(60, gcsfuse=True)  # the lock is held all along: any apt-get would wait or fail
    spec = tmp_path / "ready.yaml"
    spec.write_text(BUCKET_JOB.format(name="ready", bucket=_bucket(f"ready-{os.getpid()}")))
    result = cli("create", spec)
    assert result.code == 0, result.err
    job = _show(cli, "ready")
    assert job["state"] == "RUNNING"
    said = _host_log(tpujob_home, job["id"])
    assert "tpujob: mounted gs://" in said and "cache lock" not in said and "Setting up" not in said
    assert cli("delete", "ready").code == 0
