"""`tpujob doctor`: every check in its ok and its failing form, through the real CLI; the cloud
checks against the shared emulator (the code path that asks Google on gcp)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tpujob import preflight
from tpujob.service import cron, watchers

SPEC = """\
name: {name}
tpu: {{accelerator: {accelerator}, zone: {zone}, queued: true}}
{extra}
run:
  command: "sleep 600"
"""


def doctor(cli, *args):
    result = cli("doctor", "--json", *args)
    data = json.loads(result.out)
    checks = {c["name"]: c for c in data["local"] + data["cloud"]}
    return result, data, checks


def record(spec_file, name="j", accelerator="v4-8", zone="us-central2-b", extra=""):
    """A PENDING job on record (nothing created: no sweep runs)."""
    from tpujob.service import jobs
    from tpujob.service.context import Context

    path = spec_file(SPEC.format(name=name, accelerator=accelerator, zone=zone, extra=extra))
    return jobs.record(Context.load(), str(path))[0]


@pytest.fixture
def no_cron(monkeypatch):
    """This store has no crontab line (the real crontab is left alone)."""
    monkeypatch.setattr(cron, "installed", lambda: None)


@pytest.fixture
def crontab(stand_in_crontab):
    """A crontab of the test's own (conftest's stand_in_crontab)."""


# ---- local checks ------------------------------------------------------------------------------

def test_a_fresh_home_is_healthy_but_warns_that_nothing_sweeps(cli, no_cron, tpujob_home):
    result, data, checks = doctor(cli)
    assert result.code == 0, result.err
    for name in ("store", "home", "ssh key", "secrets.env", "emulator: root", "emulator: libfuse"):
        assert checks[name]["status"] == "ok", checks[name]
    assert checks["sweeper"]["status"] == "warning"
    assert checks["sweeper"]["fix"] == "tpujob cron install --every 5m"
    # Without a running emulator the cloud checks say how to get one, and start nothing.
    assert data["cloud"] == [{"name": "emulator", "status": "warning", "fix": "tpujob emulator start",
                              "detail": checks["emulator"]["detail"]}]
    assert not (tpujob_home / "emulator").exists()


def test_text_output_is_a_checklist_with_fixes(cli, no_cron):
    result = cli("doctor")
    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[0] == "local:" and any(line.startswith("cloud (local):") for line in lines)
    assert any(line.split()[:2] == ["ok", "store"] for line in lines)
    assert any(line.split()[:2] == ["warning", "sweeper"] for line in lines)
    assert any(line.strip() == "fix: tpujob cron install --every 5m" for line in lines)


def test_a_store_that_does_not_open_is_an_error_and_exit_6(cli, no_cron, monkeypatch):
    monkeypatch.setenv("TPUJOB_DB_URL", "postgresql+nosuchdriver://alice:s3cr3t-pw@db.example.org/lab")
    result, data, checks = doctor(cli)
    assert result.code == 6 and data["ok"] is False
    assert checks["store"]["status"] == "error" and "cannot open store" in checks["store"]["detail"]
    assert "s3cr3t-pw" not in result.out + result.err
    assert result.error_line == "error: 1 check failed: store"


def test_a_group_writable_home_is_an_error(cli, no_cron, tpujob_home):
    tpujob_home.mkdir(parents=True)
    tpujob_home.chmod(0o775)
    result, _, checks = doctor(cli)
    assert result.code == 6
    assert checks["home"]["status"] == "error" and checks["home"]["fix"] == f"chmod 700 {tpujob_home}"
    tpujob_home.chmod(0o700)
    assert doctor(cli)[2]["home"]["status"] == "ok"


def test_a_fresh_home_and_store_are_private_to_their_user(cli, no_cron, tpujob_home):
    """On a shared machine the store (every job's spec and events) and the hosts' logs are the
    user's alone: made 0700 and 0600 whatever the umask allows others."""
    old = os.umask(0o022)
    try:
        result = cli("list")
    finally:
        os.umask(old)
    assert result.code == 0, result.err
    assert oct(tpujob_home.stat().st_mode & 0o777) == oct(0o700)
    for name in ("tpujob.db", "tpujob.db-wal", "tpujob.db-shm"):
        if (tpujob_home / name).exists():
            assert oct((tpujob_home / name).stat().st_mode & 0o777) == oct(0o600), name
    assert (tpujob_home / "tpujob.db").exists()


def test_an_older_home_and_store_open_to_others_are_warnings_with_the_fix(cli, no_cron, tpujob_home):
    """Made 0755 and 0644 by earlier versions: doctor says so and how to fix it, changing nothing."""
    cli("list")
    tpujob_home.chmod(0o755)
    db = tpujob_home / "tpujob.db"
    db.chmod(0o644)
    result, _, checks = doctor(cli)
    assert result.code == 0
    assert checks["home"]["status"] == "warning" and checks["home"]["fix"] == f"chmod 700 {tpujob_home}"
    assert "mode 755" in checks["home"]["detail"]
    assert checks["store"]["status"] == "warning" and checks["store"]["fix"] == f"chmod 600 {db}"
    assert f"{db} is readable by group or others (mode 644)" in checks["store"]["detail"]
    assert (tpujob_home.stat().st_mode & 0o777, db.stat().st_mode & 0o777) == (0o755, 0o644)
    tpujob_home.chmod(0o700)
    db.chmod(0o600)
    _, _, checks = doctor(cli)
    assert checks["home"]["status"] == checks["store"]["status"] == "ok"


def test_the_ssh_key_must_be_private(cli, no_cron, tpujob_home):
    from tpujob.hosts.keys import ensure_key

    key = ensure_key(tpujob_home)
    checks = doctor(cli)[2]
    assert checks["ssh key"]["status"] == "ok" and "mode 600" in checks["ssh key"]["detail"]
    key.chmod(0o644)
    result, _, checks = doctor(cli)
    assert result.code == 6
    assert checks["ssh key"]["status"] == "error" and checks["ssh key"]["fix"] == f"chmod 600 {key}"


def test_secrets_env_must_be_mode_600_and_well_formed(cli, no_cron, tpujob_home):
    path = tpujob_home / "secrets.env"
    tpujob_home.mkdir(parents=True)
    path.write_text("WANDB_API_KEY=abc123\n")
    path.chmod(0o600)
    checks = doctor(cli)[2]
    assert checks["secrets.env"]["status"] == "ok" and "1 values" in checks["secrets.env"]["detail"]
    path.chmod(0o644)
    result, _, checks = doctor(cli)
    assert result.code == 6 and checks["secrets.env"]["fix"] == f"chmod 600 {path}"
    path.chmod(0o600)
    path.write_text("not a pair\n")
    result, _, checks = doctor(cli)
    assert checks["secrets.env"]["status"] == "error" and "line 1" in checks["secrets.env"]["detail"]
    assert "abc123" not in result.out + result.err


def test_no_sweeper_with_active_jobs_is_an_error(cli, no_cron, spec_file):
    record(spec_file)
    result, _, checks = doctor(cli)
    assert result.code == 6
    assert checks["sweeper"]["status"] == "error" and "1 active job" in checks["sweeper"]["detail"]


def test_a_cron_entry_for_this_store_is_a_sweeper(cli, crontab, spec_file):
    record(spec_file)
    assert doctor(cli)[2]["sweeper"]["status"] == "error"
    assert cli("cron", "install", "--every", "10m").code == 0
    check = doctor(cli)[2]["sweeper"]
    assert check["status"] == "ok" and "*/10 * * * *" in check["detail"]


def test_a_running_watch_is_a_sweeper_and_a_dead_one_is_not(cli, no_cron, spec_file, tpujob_home):
    record(spec_file)
    with watchers.watching(interval=60):
        check = doctor(cli)[2]["sweeper"]
        assert check["status"] == "ok" and f"({os.getpid()}@" in check["detail"]
    assert not list((tpujob_home / "watchers").iterdir())
    # A watch killed without cleaning up: its file stays, its process is gone.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tpujob_home / "watchers" / f"{dead.pid}.json").write_text(json.dumps(
        {"pid": dead.pid, "host": os.uname().nodename, "started": None, "interval": 60}))
    assert doctor(cli)[2]["sweeper"]["status"] == "error"


def test_missing_emulator_prerequisites_are_errors_on_local_and_warnings_on_gcp(cli, no_cron, monkeypatch):
    monkeypatch.setattr(preflight, "find_libfuse", lambda: None)
    result, _, checks = doctor(cli)
    assert result.code == 6
    assert checks["emulator: libfuse"]["status"] == "error"
    assert checks["emulator: libfuse"]["fix"] == "apt-get install -y fuse libfuse2"

    from google.auth.exceptions import DefaultCredentialsError

    from tpujob.service import doctor_cloud

    def no_adc():
        raise DefaultCredentialsError("Your default credentials were not found.")

    monkeypatch.setattr(doctor_cloud, "adc", no_adc)
    monkeypatch.setenv("TPUJOB_CLOUD", "gcp")
    checks = doctor(cli)[2]
    assert checks["emulator: libfuse"]["status"] == "warning"
    assert "only the local emulator needs it" in checks["emulator: libfuse"]["detail"]


# ---- cloud checks: gcp credentials and project (no network: ADC replaced) ------------------------

class FakeCredentials:
    service_account_email = "trainer@proj.iam.gserviceaccount.com"

    def __init__(self, refresh_error=None):
        self.refresh_error = refresh_error

    def refresh(self, request):
        if self.refresh_error:
            raise self.refresh_error


def test_gcp_without_credentials_stops_at_the_credentials_check(cli, no_cron, monkeypatch):
    from google.auth.exceptions import DefaultCredentialsError

    from tpujob.service import doctor_cloud

    def no_adc():
        raise DefaultCredentialsError("Your default credentials were not found. To set up Application "
                                      "Default Credentials, see https://cloud.google.com/docs/authentication")

    monkeypatch.setattr(doctor_cloud, "adc", no_adc)
    monkeypatch.setenv("TPUJOB_CLOUD", "gcp")
    monkeypatch.setenv("TPUJOB_PROJECT", "my-proj")
    result, data, checks = doctor(cli)
    assert result.code == 6
    assert checks["credentials"]["status"] == "error"
    assert checks["credentials"]["fix"] == "gcloud auth application-default login"
    assert [c["name"] for c in data["cloud"]] == ["credentials", "project"]  # no call without them


def test_gcp_credentials_that_cannot_refresh_are_an_error(monkeypatch):
    from google.auth.exceptions import RefreshError

    from tpujob.service import doctor_cloud

    monkeypatch.setattr(doctor_cloud, "adc", lambda: (FakeCredentials(RefreshError(
        "('invalid_grant: Token has been expired or revoked.', {...})")), "proj"))
    check, credentials, _ = doctor_cloud.adc_check()
    assert check.status == "error" and "expired or revoked" in check.detail and credentials is None
    monkeypatch.setattr(doctor_cloud, "adc", lambda: (FakeCredentials(), "proj-from-adc"))
    check, credentials, project = doctor_cloud.adc_check()
    assert check.status == "ok" and "trainer@proj.iam.gserviceaccount.com" in check.detail
    assert project == "proj-from-adc"


def test_gcp_without_a_project_is_an_error(cli, no_cron, monkeypatch):
    from tpujob.service import doctor_cloud

    monkeypatch.setattr(doctor_cloud, "adc", lambda: (FakeCredentials(), None))
    monkeypatch.setenv("TPUJOB_CLOUD", "gcp")
    result, _, checks = doctor(cli)
    assert result.code == 6 and checks["credentials"]["status"] == "ok"
    assert checks["project"]["status"] == "error"
    assert checks["project"]["fix"] == "tpujob config set project PROJECT_ID"


# ---- cloud checks against the emulator -----------------------------------------------------------

def test_every_cloud_check_passes_against_the_emulator(cli, no_cron, local_cloud, shared_emulator, spec_file):
    from tpujob.clients import make_storage
    from tpujob.service.context import Context

    gcs = make_storage(Context.load().settings)
    if gcs.lookup_bucket("doctor-runs") is None:
        gcs.create_bucket("doctor-runs")  # the emulator makes it in US: serves us-central2
    record(spec_file, extra="run_dir: gs://doctor-runs/runs")
    result, data, checks = doctor(cli)
    assert [c["name"] for c in data["cloud"]] == ["credentials", "project", "tpu api", "compute api", "compute quotas",
                                                 "accelerators", "orphans", "os login", "clock: cloud",
                                                 "buckets"]
    for check in data["cloud"]:
        assert check["status"] == "ok", check
    assert checks["credentials"]["detail"].startswith("anonymous, against the local emulator")
    assert checks["accelerators"]["detail"] == "v4-8 in us-central2-b"
    assert "us-central2" in checks["buckets"]["detail"]
    assert checks["orphans"]["detail"] == "0 leftover resources (tpujob gc)"
    assert "this node's clock agrees with the emulator's" in checks["clock: cloud"]["detail"]


def test_a_node_ten_minutes_off_is_told_against_the_store_server_and_the_cloud(cli, no_cron, local_cloud,
                                                                                  postgres_url, monkeypatch):
    # A lab node whose clock is off: tpujob's decisions hold (the store server's clock), and
    # doctor says by how much against each clock it meets, with the fix.
    monkeypatch.setenv("TPUJOB_DB_URL", postgres_url)
    monkeypatch.setenv("TPUJOB_CLOCK_SKEW_SECONDS", "600")
    result, data, checks = doctor(cli)
    store, cloud = checks["clock: store"], checks["clock: cloud"]
    assert store["status"] == "warning" and cloud["status"] == "warning", (store, cloud)
    assert re.search(r"this node's clock is 60\d s ahead of the store server's", store["detail"]), store
    assert "tpujob writes and judges every time on the server's clock" in store["detail"]
    assert re.search(r"this node's clock is 60\d s ahead of the emulator's", cloud["detail"]), cloud
    assert "timedatectl set-ntp true" in store["fix"] and "timedatectl set-ntp true" in cloud["fix"]
    monkeypatch.setenv("TPUJOB_CLOCK_SKEW_SECONDS", "-600")
    _, _, checks = doctor(cli)
    assert re.search(r"59\d s behind the store server's|60\d s behind the store server's",
                     checks["clock: store"]["detail"])


def test_the_lab_lists_the_nodes_that_registered_and_os_login_names_the_sweepers_role(
        cli, no_cron, local_cloud, monkeypatch):
    import uuid

    from tpujob.service import keep_alive
    from tpujob.service.context import Context

    project = f"doctor-{uuid.uuid4().hex[:8]}"  # OS Login goes on for this test's project alone
    monkeypatch.setenv("TPUJOB_PROJECT", project)
    _, _, checks = doctor(cli)
    assert checks["clock: store"]["detail"] == "the store is a file on this machine: one clock"
    assert "no node has swept or created on this store yet" in checks["lab"]["detail"]
    keep_alive.requeue(Context.load())  # a sweep registers this node
    local_cloud.oslogin(project, True)
    _, _, checks = doctor(cli)
    assert checks["lab"]["detail"].startswith("1 node shares this store"), checks["lab"]
    assert "roles/compute.osAdminLogin" in checks["os login"]["detail"]


@pytest.mark.parametrize("api, method, service, title", [
    ("tpu api", "tpu.projects.locations.nodes.list", "tpu.googleapis.com", "Cloud TPU API"),
    ("compute api", "compute.disks.list", "compute.googleapis.com", "Compute Engine API"),
])
def test_a_disabled_api_says_how_to_enable_it(cli, no_cron, local_cloud, api, method, service, title):
    """The emulator answers doctor's one cheap call of the API with Google's SERVICE_DISABLED 403
    (tests/fixtures/gcp_errors/api_disabled.json; for Compute its service name and title), so the
    real client, the cloud layer's typing and doctor's reading of it all run."""
    answer = json.loads((Path(__file__).parents[1] / "fixtures" / "gcp_errors" / "api_disabled.json").read_text())
    message = answer["message"].replace("Cloud TPU API", title).replace("tpu.googleapis.com", service)
    local_cloud.fail_next(method, answer["status"], message, grpc_status=answer["grpc_status"],
                          reason=answer["reason"])
    try:
        result, _, checks = doctor(cli)
    finally:
        local_cloud.clear_fail_next()
    assert result.code == 6
    assert checks[api]["status"] == "error"
    assert checks[api]["detail"] == f"the {title} is not enabled in project tpujob-local"
    assert checks[api]["fix"] == f"gcloud services enable {service} --project tpujob-local"
    other = ({"tpu api", "compute api"} - {api}).pop()
    assert checks[other]["status"] == "ok"


def test_an_accelerator_its_zone_does_not_offer_is_an_error(cli, no_cron, local_cloud, spec_file):
    record(spec_file, name="far", accelerator="v4-8", zone="us-central1-a")  # v4: us-central2-b only
    result, _, checks = doctor(cli)
    assert result.code == 6
    assert checks["accelerators"]["status"] == "error"
    assert "v4-8 in us-central1-a" in checks["accelerators"]["detail"]


def test_a_missing_bucket_is_an_error_and_a_far_one_a_warning(cli, no_cron, local_cloud, shared_emulator,
                                                             spec_file):
    import requests

    from tpujob.clients import make_storage
    from tpujob.service import jobs
    from tpujob.service.context import Context

    job = record(spec_file, name="nobucket", extra="run_dir: gs://doctor-no-such-bucket/runs")
    result, _, checks = doctor(cli)
    assert result.code == 6 and checks["buckets"]["status"] == "error"
    assert "doctor-no-such-bucket does not exist" in checks["buckets"]["detail"]
    assert checks["buckets"]["fix"] == "tpujob emulator create-bucket doctor-no-such-bucket"
    jobs.cancel(Context.load(), str(job.id))

    gcs = make_storage(Context.load().settings)
    if gcs.lookup_bucket("doctor-far") is None:
        gcs.create_bucket("doctor-far")
    assert requests.patch(f"{shared_emulator['storage_endpoint']}/storage/v1/b/doctor-far",
                          json={"location": "EUROPE-WEST4"}, timeout=10).ok
    record(spec_file, name="far", extra="run_dir: gs://doctor-far/runs")
    checks = doctor(cli)[2]
    assert checks["buckets"]["status"] == "warning" and "EUROPE-WEST4" in checks["buckets"]["detail"]


# ---- nothing silent after create -----------------------------------------------------------------

NOTHING_SWEEPS = "warning: nothing will re-queue this job after a preemption"


def test_dry_run_does_not_warn(cli, no_cron, spec_file):
    result = cli("create", "--dry-run", spec_file(SPEC.format(name="dry", accelerator="v4-8",
                                                             zone="us-central2-b", extra="")))
    assert result.code == 0 and NOTHING_SWEEPS not in result.err


@pytest.mark.slow
def test_create_warns_when_nothing_sweeps_and_not_when_a_watch_runs(cli, no_cron, local_cloud, spec_file):
    lonely = spec_file(SPEC.format(name="lonely", accelerator="v4-8", zone="us-central2-b", extra=""))
    result = cli("create", "--timeout", "0", lonely)
    assert result.code == 0, result.err
    last = result.err.strip().splitlines()[-1]
    assert last == f"{NOTHING_SWEEPS}: this store has no cron entry and no `tpujob watch` is running; " \
                   "run `tpujob cron install --every 5m`"
    assert cli("delete", "lonely").code == 0

    watched = spec_file(SPEC.format(name="watched", accelerator="v4-8", zone="us-central2-b", extra=""))
    with watchers.watching(interval=60):
        result = cli("create", "--timeout", "0", watched)
    assert result.code == 0, result.err
    assert NOTHING_SWEEPS not in result.err
    assert cli("delete", "watched").code == 0


@pytest.mark.slow
def test_tpujob_watch_registers_itself_while_it_runs(cli, no_cron, local_cloud, tpujob_home):
    env = {**os.environ, "TPUJOB_HOME": str(tpujob_home)}
    watch = subprocess.Popen([sys.executable, "-m", "tpujob.cli.main", "watch", "--interval", "0.2"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not [w for w in watchers.running_watchers() if w.pid == watch.pid]:
            assert watch.poll() is None, watch.stderr.read().decode()
            assert time.monotonic() < deadline, "watch never registered"
            time.sleep(0.1)
        assert doctor(cli)[2]["sweeper"]["status"] == "ok"
    finally:
        # systemctl stop: the watch finishes the sweep under way, unregisters and exits 0.
        # (SIGTERM, not Ctrl-C's SIGINT: a process started in the background ignores SIGINT.)
        watch.send_signal(signal.SIGTERM)
        assert watch.wait(timeout=30) == 0, watch.stderr.read().decode()
    assert watchers.running_watchers() == []
    assert not list((tpujob_home / "watchers").glob("*.json"))
