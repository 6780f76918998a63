"""The CLI contract: exit codes, one-line errors, `--json` shapes, dry runs, settings, and a `list`
that imports no cloud, SSH or JAX module."""

from __future__ import annotations

import getpass
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "jobs.example.yaml"

# No test here may leave a background emulator behind (checked after every test).
pytestmark = pytest.mark.usefixtures("no_emulator_left")

LIST_KEYS = {"id", "name", "state", "end_reason", "accelerator", "zone", "attempt", "preemptions", "created_at"}


@pytest.fixture
def job(record):
    """A recorded, not yet started job (the example spec); its id as the CLI prints it."""
    return record(EXAMPLE)


@pytest.fixture
def record():
    """Record a spec as PENDING (what `create` does before it starts the job) -> its id."""
    from tpujob.service import jobs
    from tpujob.service.context import Context

    def run(path) -> str:
        job, _ = jobs.record(Context.load(), str(path))
        return f"{job.id:06d}"

    return run


# --- validate and create ------------------------------------------------------------------------

def test_validate_prints_the_resolved_spec(cli):
    result = cli("validate", EXAMPLE)
    assert result.code == 0 and result.err == ""
    assert "hosts:        2" in result.out and "chips:        8" in result.out
    assert "spec is valid" in result.out


def test_validate_json(cli, stored_jobs):
    result = cli("validate", "--json", EXAMPLE)
    assert result.code == 0
    data = json.loads(result.out)
    assert {"hosts", "chips", "runtime_version"} <= set(data)
    assert (data["hosts"], data["chips"], data["runtime_version"]) == (2, 8, "tpu-ubuntu2204-base")
    assert data["spec"]["name"] == "demo"
    assert stored_jobs() == 0


def test_validate_prints_the_spot_price_for_a_spot_job(cli, spec_file):
    path = spec_file("name: demo\ntpu: {accelerator: v4-16, zone: us-central2-b}\nrun: {command: x}\n")
    result = cli("validate", path)
    assert "cost:         $7.73/h (spot price; on-demand list price $25.76/h)" in result.out
    data = json.loads(cli("validate", "--json", path).out)
    assert (data["cost_per_hour_usd"], data["on_demand_cost_per_hour_usd"]) == (7.73, 25.76)


def test_validate_says_unknown_where_no_spot_price_is_published(cli, spec_file):
    path = spec_file("name: demo\ntpu: {accelerator: v6e-8, zone: us-east5-b}\nrun: {command: x}\n")
    result = cli("validate", path)
    assert result.code == 0
    assert ("cost:         unknown: no published spot price for v6e (on-demand list price $21.60/h)"
            in result.out)
    assert json.loads(cli("validate", "--json", path).out)["cost_per_hour_usd"] is None


def test_validate_prints_the_list_price_for_an_on_demand_job(cli, spec_file):
    path = spec_file("name: demo\ntpu: {accelerator: v6e-8, zone: us-east5-b, provisioning: on-demand}\n"
                     "run: {command: x}\n")
    assert "cost:         $21.60/h (on-demand list price)" in cli("validate", path).out
    assert json.loads(cli("validate", "--json", path).out)["cost_per_hour_usd"] == 21.60


def test_validate_prints_what_a_compute_slice_becomes(cli, spec_file, stored_jobs):
    path = spec_file("name: demo\ntpu: {accelerator: v6e-16, zone: us-east5-b, api: compute, provisioning: flex-start, "
                     "max_run_duration: 2h}\nrun: {command: x}\n")
    result = cli("validate", path)
    assert result.code == 0 and result.err == "", result
    assert ("compute engine: 4 x ct6e-standard-4t (topology 4x4, workload policy + BULK MIG), flex-start, at most 2h"
            in result.out), result.out
    assert "image:        ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e (ubuntu-os-accelerator-images), boot disk " \
           "hyperdisk-balanced" in result.out
    assert "provisioning: flex-start\n" in result.out  # not queued: no queued resources on Compute Engine
    data = json.loads(cli("validate", "--json", path).out)
    assert (data["api"], data["provisioning"], data["compute"]["machine_type"], data["compute"]["hosts"],
            data["compute"]["topology"]) == ("compute", "flex-start", "ct6e-standard-4t", 4, "4x4")
    assert stored_jobs() == 0


def test_validate_prints_a_single_host_compute_slice_as_an_instance(cli, spec_file):
    path = spec_file("name: demo\ntpu:\n  accelerator: v6e-8\n  zone: us-east5-b\n  api: compute\n"
                     "  provisioning: flex-start\n  max_run_duration: 36h\nrun: {command: x}\n")
    result = cli("validate", path)
    assert result.code == 0, result
    assert "compute engine: 1 x ct6e-standard-8t (instance), flex-start, at most 1d12h, price unknown" in result.out
    assert ("cost:         unknown: flex-start is billed at Dynamic Workload Scheduler prices, below on-demand "
            "(on-demand list price $21.60/h)") in result.out


def test_validate_resolves_tpu7x_to_compute_engine(cli, spec_file):
    path = spec_file("name: demo\ntpu:\n  accelerator: tpu7x-16\n  zone: us-central1-c\n"
                     "  provisioning: reservation\n  reservation: my-res\nrun: {command: x}\n")
    result = cli("validate", path)
    assert result.code == 0 and result.err == "", result
    assert ("compute engine: 2 x tpu7x-standard-4t (topology 2x2x2, workload policy + BULK MIG), "
            "reservation my-res, price unknown") in result.out


def test_validate_of_a_tpu_api_job_names_no_compute_engine(cli, spec_file):
    path = spec_file("name: demo\ntpu: {accelerator: v6e-8, zone: us-east5-b}\nrun: {command: x}\n")
    result = cli("validate", path)
    assert "compute engine:" not in result.out and "runtime:      v2-alpha-tpuv6e" in result.out
    assert json.loads(cli("validate", "--json", path).out)["api"] == "tpu-vm"


def test_dry_run_records_nothing_and_prints_the_plan(cli, tpujob_home, stored_jobs):
    result = cli("create", "--dry-run", EXAMPLE)
    assert result.code == 0, result.err
    assert "cloud: local" in result.out
    assert "create queued resource" in result.out and "tpujob-SSSSSS-NNNNNN-1" in result.out
    assert stored_jobs() == 0
    assert not (tpujob_home / "tpujob.db").exists()


def test_dry_run_json_is_an_ordered_plan(cli, stored_jobs):
    result = cli("create", "--dry-run", "--json", EXAMPLE)
    steps = json.loads(result.out)
    assert all(set(s) == {"action", "resource", "detail"} for s in steps)
    assert steps[0]["action"] == "create queued resource" and steps[-1]["action"] == "launch"
    assert stored_jobs() == 0


def test_create_without_credentials_records_nothing(cli, stored_jobs, spec_file, monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    cli("config", "set", "cloud", "gcp")
    path = spec_file("name: demo\ntpu: {accelerator: v4-8, zone: us-central2-b, project: lab}\nrun: {command: x}\n")
    result = cli("create", path)
    assert result.code == 6, result.err
    assert result.error_line.startswith("error: ")
    assert stored_jobs() == 0


@pytest.mark.parametrize(("name", "value", "said"), [
    ("QUEUE_FOLLOW_SECONDS", "soon", "seconds from 0 to 86400"),
    ("SWEEP_WORKERS", "0", "a whole number from 1 to 256"),
    ("LEASE_SECONDS", "-5", "seconds from 1 to 604800"),
])
def test_create_refuses_a_bad_follow_setting_and_records_nothing(cli, stored_jobs, spec_file, monkeypatch,
                                                                 name, value, said):
    # What following the new job reads is checked before the job is recorded (and before the
    # emulator starts): a refusal after recording would leave a job nobody followed.
    monkeypatch.setenv(f"TPUJOB_{name}", value)
    path = spec_file("name: demo\ntpu: {accelerator: v4-8, zone: us-central2-b}\nrun: {command: x}\n")
    result = cli("create", path)
    assert result.code == 6, result.err
    assert result.error_line == f"error: TPUJOB_{name} must be {said}, got {value!r}"
    assert stored_jobs() == 0


# --- list and show ------------------------------------------------------------------------------

def test_list_json_shape(cli, job):
    result = cli("list", "--json")
    assert result.code == 0
    rows = json.loads(result.out)
    assert isinstance(rows, list) and len(rows) == 1
    row = rows[0]
    assert LIST_KEYS <= set(row)
    assert row["id"] == job == "000001"
    assert (row["name"], row["state"], row["end_reason"]) == ("demo", "PENDING", None)
    assert (row["accelerator"], row["zone"], row["attempt"], row["preemptions"]) == ("v4-16", "us-central2-b", 0, 0)
    assert isinstance(row["created_at"], str) and row["created_at"].startswith("20")


def test_list_empty_json_is_an_empty_list(cli):
    result = cli("list", "--json")
    assert (result.code, json.loads(result.out)) == (0, [])


def test_list_table_columns(cli, job):
    result = cli("list")
    header, row = result.out.splitlines()
    columns = header.split()
    wanted = ["ID", "NAME", "OWNER", "ACCELERATOR", "SLICES", "ZONE", "STATE", "ATTEMPT", "PREEMPTIONS", "AGE"]
    assert [c for c in columns if c in wanted] == wanted
    owner = f"{getpass.getuser()}@{socket.gethostname()}"
    assert row.split()[:7] == [job, "demo", owner, "v4-16", "1", "us-central2-b", "PENDING"]


def test_list_hides_ended_jobs_unless_all(cli, job):
    assert cli("cancel", job).code == 0
    assert json.loads(cli("list", "--json").out) == []
    rows = json.loads(cli("list", "--all", "--json").out)
    assert [(r["id"], r["state"]) for r in rows] == [(job, "CANCELLED")]


def test_show_json_shape(cli, job):
    result = cli("show", "--json", job)
    assert result.code == 0
    data = json.loads(result.out)
    assert LIST_KEYS | {"attempts", "events"} <= set(data)
    assert data["id"] == job and data["attempts"] == []
    (event,) = data["events"]
    assert {"at", "kind", "message"} <= set(event)
    assert (event["kind"], event["to_state"]) == ("created", "PENDING")


def test_show_by_name_and_text(cli, job):
    result = cli("show", "demo")
    assert result.code == 0
    assert f"id:           {job}" in result.out and "events:" in result.out


def test_cancel_delete_clean(cli, job, tpujob_home):
    (tpujob_home / "logs" / job).mkdir(parents=True)
    assert cli("cancel", job).out.strip() == f"job {job} CANCELLED"
    assert cli("delete", job).out.strip() == f"job {job} DELETED"
    assert cli("delete", job).code == 0  # deleting a deleted job is a no-op
    events = json.loads(cli("show", "--json", job).out)["events"]
    assert [(e["from_state"], e["to_state"]) for e in events[1:]] == [("PENDING", "CANCELLED"),
                                                                      ("CANCELLED", "DELETED")]
    assert cli("clean", job).out.strip() == f"job {job} cleaned"
    assert not (tpujob_home / "logs" / job).exists()
    assert cli("show", job).code == 3


def test_a_cancel_that_loses_its_move_leaves_the_attempt_open(cli, job, monkeypatch):
    """The attempt ends in the move's transaction: a move lost to another actor ends nothing."""
    from tpujob.errors import IllegalTransition
    from tpujob.service import jobs
    from tpujob.service.context import Context
    from tpujob.store.repository import Store
    from tpujob.store.states import State

    store = Context.load().store
    store.start_attempt(int(job), State.PENDING, State.PROVISIONING, "attempt 1", zone="us-central2-b",
                        accelerator="v4-8", queued=False)
    monkeypatch.setattr(jobs, "make_cloud", lambda settings: None)  # no slice to reach
    monkeypatch.setattr(jobs, "_stop_program", lambda ctx, job, cloud: None)

    def lost(self, *args, **kwargs):
        raise IllegalTransition("another actor moved it first")

    monkeypatch.setattr(Store, "transition", lost)
    result = cli("cancel", job)
    assert result.code == 4 and "another actor moved it first" in result.error_line
    [attempt] = store.attempts(int(job))
    assert (attempt.ended_at, attempt.end_reason) == (None, None)


# --- exit codes and errors ----------------------------------------------------------------------

def test_exit_codes(cli, job, spec_file):
    assert cli("validate", EXAMPLE).code == 0
    bad = cli("validate", spec_file("name: demo\n"))
    assert bad.code == 2 and bad.error_line.startswith("error: ")
    missing = cli("show", "999")
    assert (missing.code, missing.error_line) == (3, "error: no job 000999")
    assert cli("show", "no-such-name").code == 3
    assert cli("cancel", job).code == 0
    again = cli("cancel", job)
    assert again.code == 4 and "CANCELLED: nothing to cancel" in again.error_line
    assert cli("delete", job).code == 0
    assert cli("cancel", job).code == 4


@pytest.mark.parametrize("args", [
    ["list", "--bogus"],
    ["show"],
    ["no-such-command"],
    ["validate"],
    ["config", "set", "zone"],
])
def test_usage_errors_exit_2(cli, args):
    result = cli(*args)
    assert result.code == 2
    assert result.error_line


def test_help_exits_0(cli):
    result = cli("--help")
    assert result.code == 0
    for command in ("validate", "create", "list", "show", "cancel", "delete", "clean", "config"):
        assert command in result.out


def test_debug_shows_the_traceback(cli):
    result = cli("--debug", "show", "999")
    assert result.code == 3
    assert "Traceback" in result.err
    assert result.err.strip().splitlines()[-1] == "error: no job 000999"


# --- settings -----------------------------------------------------------------------------------

def test_config_defaults(cli, tpujob_home):
    data = json.loads(cli("config", "show", "--json").out)
    assert (data["cloud"], data["zone"], data["home"]) == ("local", "", str(tpujob_home))
    assert data["database_url"] == f"sqlite:///{tpujob_home / 'tpujob.db'}"


def test_config_set_and_show(cli, tpujob_home):
    assert cli("config", "set", "zone", "europe-west4-a").code == 0
    assert cli("config", "set", "project", "my-lab").code == 0
    assert yaml.safe_load((tpujob_home / "config.yaml").read_text()) == {"zone": "europe-west4-a",
                                                                          "project": "my-lab"}
    data = json.loads(cli("config", "show", "--json").out)
    assert (data["zone"], data["project"]) == ("europe-west4-a", "my-lab")
    assert ["zone:", "europe-west4-a"] in [line.split() for line in cli("config", "show").out.splitlines()]


def test_environment_overrides_the_file(cli, monkeypatch):
    cli("config", "set", "zone", "europe-west4-a")
    monkeypatch.setenv("TPUJOB_ZONE", "us-east1-d")
    monkeypatch.setenv("TPUJOB_SSH_USER", "alice")
    data = json.loads(cli("config", "show", "--json").out)
    assert (data["zone"], data["ssh_user"]) == ("us-east1-d", "alice")


SECRET_URL = "postgresql://alice:s3cr3t-pw@db.example.org:5432/lab"


def test_config_show_hides_the_database_password(cli, monkeypatch):
    monkeypatch.setenv("TPUJOB_DB_URL", SECRET_URL)
    text = cli("config", "show")
    data = json.loads(cli("config", "show", "--json").out)
    assert "s3cr3t-pw" not in text.out + text.err
    assert ["database_url:", "postgresql://alice:***@db.example.org:5432/lab"] in [
        line.split() for line in text.out.splitlines()]
    assert data["db_url"] == data["database_url"] == "postgresql://alice:***@db.example.org:5432/lab"


def test_config_set_db_url_does_not_echo_the_password(cli, tpujob_home):
    result = cli("config", "set", "db_url", SECRET_URL)
    assert result.code == 0 and "s3cr3t-pw" not in result.out + result.err
    assert "alice:***@db.example.org" in result.out
    # The file keeps what the user set: the store needs the real password. Its user's alone.
    assert yaml.safe_load((tpujob_home / "config.yaml").read_text())["db_url"] == SECRET_URL
    assert (tpujob_home / "config.yaml").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("url", [
    "postgresql+nosuchdriver://alice:s3cr3t-pw@db.example.org/lab",   # unknown dialect
    "postgresql://alice:s3cr3t-pw@db.example.org:notaport/lab",        # unparsable
])
def test_a_store_that_cannot_open_does_not_print_its_password(cli, monkeypatch, url):
    monkeypatch.setenv("TPUJOB_DB_URL", url)
    for args in (["list"], ["--debug", "list"]):
        result = cli(*args)
        assert result.code == 6
        assert "s3cr3t-pw" not in result.out + result.err
        assert "cannot open store" in result.err and "***@db.example.org" in result.err


@pytest.mark.parametrize("args", [["config", "set", "colour", "blue"], ["config", "set", "cloud", "aws"]])
def test_config_set_refuses_bad_input_and_writes_nothing(cli, tpujob_home, args):
    result = cli(*args)
    assert result.code == 2 and result.error_line
    assert not (tpujob_home / "config.yaml").exists()


def test_a_bad_cloud_from_the_environment_is_a_config_error(cli, monkeypatch):
    monkeypatch.setenv("TPUJOB_CLOUD", "aws")
    result = cli("list")
    assert result.code == 6 and "cloud must be one of local, gcp" in result.error_line


def test_a_broken_config_file_is_a_config_error(cli, tpujob_home):
    tpujob_home.mkdir(parents=True)
    (tpujob_home / "config.yaml").write_text("zone: [unclosed\n")
    assert cli("config", "show").code == 6
    (tpujob_home / "config.yaml").write_text("colour: blue\n")
    result = cli("list")
    assert result.code == 6 and "unknown setting 'colour'" in result.error_line


def test_the_zone_default_comes_from_settings(cli, spec_file, monkeypatch):
    path = spec_file("name: demo\ntpu: {accelerator: v4-8}\nrun: {command: x}\n")
    assert cli("validate", path).code == 2
    monkeypatch.setenv("TPUJOB_ZONE", "us-central2-b")
    data = json.loads(cli("validate", "--json", path).out)
    assert data["zone"] == "us-central2-b"


def test_create_says_which_cloud(cli, spec_file):
    cli("config", "set", "cloud", "gcp")
    path = spec_file("name: demo\ntpu: {accelerator: v4-8, zone: us-central2-b, project: lab}\nrun: {command: x}\n")
    assert cli("create", "--dry-run", path).out.startswith("cloud: gcp")


def test_db_url_points_the_store_elsewhere(cli, tpujob_home, tmp_path, monkeypatch, job, record):
    other = tmp_path / "elsewhere" / "lab.db"
    monkeypatch.setenv("TPUJOB_DB_URL", f"sqlite:///{other}")
    assert json.loads(cli("list", "--json").out) == []
    record(EXAMPLE)
    assert other.exists()
    assert len(json.loads(cli("list", "--json").out)) == 1
    monkeypatch.delenv("TPUJOB_DB_URL")
    assert [r["id"] for r in json.loads(cli("list", "--json").out)] == [job]


# --- a light `list` -----------------------------------------------------------------------------

HEAVY = ("google.cloud", "google.api_core", "grpc", "paramiko", "jax", "starlette", "uvicorn", "jinja2")

PROBE = """
import json, sys
from tpujob.cli.main import main
code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules
               if m.split('.')[0] in ('grpc', 'paramiko', 'jax', 'starlette', 'uvicorn', 'jinja2')
               or m.startswith(('google.cloud', 'google.api_core')))
print(json.dumps({"code": code, "heavy": heavy}))
"""


@pytest.mark.parametrize("args", [["list"], ["list", "--all", "--json"], ["list", "--mine"], ["show", "1"],
                                  ["--help"]])
def test_light_commands_import_no_cloud_ssh_or_jax(job, tpujob_home, args):
    env = {**os.environ, "TPUJOB_HOME": str(tpujob_home)}
    out = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"code": 0, "heavy": []}, out.stderr


@pytest.mark.parametrize("args", [[], ["config"]])
def test_no_arguments_prints_the_help(cli, args):
    result = cli(*args)
    assert "show" in result.out
    assert "error:" not in result.err
