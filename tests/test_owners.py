"""Owners (issue 44, item 2): every job records who submitted it and from which node; `list`
shows OWNER and filters by it; `show` and the dashboard show it; cancel/delete/clean of another
user's job need --force. The user: the `user` setting, else ADC's account on gcp, else
$USER@host."""

from __future__ import annotations

import getpass
import json
import socket
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tpujob.service.context import Context

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "jobs.example.yaml"
LOCAL_USER = f"{getpass.getuser()}@{socket.gethostname()}"

pytestmark = pytest.mark.usefixtures("no_emulator_left")


@pytest.fixture
def record_as(monkeypatch):
    """Record the example spec as PENDING as `user` (None: no `user` setting) -> its id."""
    from tpujob.service import jobs

    def run(user: str | None) -> str:
        if user is None:
            monkeypatch.delenv("TPUJOB_USER", raising=False)
        else:
            monkeypatch.setenv("TPUJOB_USER", user)
        job, _ = jobs.record(Context.load(), str(EXAMPLE))
        return f"{job.id:06d}"

    return run


def _rows(cli, *args) -> list[dict]:
    result = cli("list", "--all", "--json", *args)
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_a_job_records_its_owner_and_node(cli, record_as, monkeypatch):
    mine = record_as(None)  # no setting, the emulator: no ADC to ask
    alices = record_as("alice@lab.example")
    rows = {r["id"]: r for r in _rows(cli)}
    assert (rows[mine]["owner"], rows[mine]["from_node"]) == (LOCAL_USER, socket.gethostname())
    assert (rows[alices]["owner"], rows[alices]["from_node"]) == ("alice@lab.example", socket.gethostname())
    shown = cli("show", alices)
    assert "owner:        alice@lab.example\n" in shown.out
    assert f"from_node:    {socket.gethostname()}\n" in shown.out
    assert json.loads(cli("show", "--json", alices).out)["owner"] == "alice@lab.example"
    created = json.loads(cli("show", "--json", alices).out)["events"][0]["message"]
    assert created.endswith(f"by alice@lab.example on {socket.gethostname()}")


def test_list_shows_owner_and_filters_by_it(cli, record_as, monkeypatch):
    alices, bobs = record_as("alice"), record_as("bob")
    monkeypatch.setenv("TPUJOB_USER", "alice")
    header, *lines = cli("list").out.splitlines()
    assert header.split()[:3] == ["ID", "NAME", "OWNER"]
    assert [line.split()[:3] for line in lines] == [[alices, "demo", "alice"], [bobs, "demo", "bob"]]
    assert [r["id"] for r in _rows(cli, "--mine")] == [alices]
    assert [r["id"] for r in _rows(cli, "--user", "bob")] == [bobs]
    assert _rows(cli, "--user", "carol") == []
    monkeypatch.setenv("TPUJOB_USER", "bob")
    assert [r["id"] for r in _rows(cli, "--mine")] == [bobs]
    refused = cli("list", "--mine", "--user", "bob")
    assert refused.code == 2 and "--mine and --user" in refused.error_line


@pytest.mark.parametrize("command", ["cancel", "delete", "clean"])
def test_another_users_job_needs_force(cli, record_as, monkeypatch, command):
    job = record_as("alice")
    monkeypatch.setenv("TPUJOB_USER", "bob")
    def record() -> tuple:
        shown = json.loads(cli("show", "--json", job).out)
        return shown["state"], shown["updated_at"], shown["events"]

    before = record()
    refused = cli(command, job)
    assert refused.code == 4
    assert refused.error_line == (f"error: job {job} is alice's, not bob's: {command} it with --force")
    assert record() == before  # nothing changed, no event
    done = cli(command, "--force", job)
    assert done.code == 0, done.err
    assert cli("show", job).code == (3 if command == "clean" else 0)


def test_a_job_from_before_owners_is_nobodys(cli, record_as, monkeypatch, tpujob_home):
    """Migration 17 leaves the jobs already stored without an owner: shown "-", anyone's to
    cancel without --force, and no one's under --mine."""
    job = record_as("alice")
    with create_engine(f"sqlite:///{tpujob_home / 'tpujob.db'}").begin() as conn:
        conn.execute(text("UPDATE job SET owner = NULL, from_node = NULL"))
    monkeypatch.setenv("TPUJOB_USER", "bob")
    assert cli("list").out.splitlines()[1].split()[:3] == [job, "demo", "-"]
    assert "owner:        -\n" in cli("show", job).out
    assert _rows(cli, "--mine") == []
    assert cli("cancel", job).code == 0


# --- the user setting ---------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["two words", "tab\there", ""])
def test_config_set_user_refuses_what_list_could_not_show(cli, tpujob_home, bad):
    result = cli("config", "set", "user", bad)
    if bad == "":  # empty: back to the default
        assert result.code == 0
        return
    assert result.code == 2 and "user must be a name without spaces" in result.error_line
    assert not (tpujob_home / "config.yaml").exists()


def test_config_set_user_is_the_owner(cli, record_as):
    assert cli("config", "set", "user", "carol@lab.example").code == 0
    assert json.loads(cli("config", "show", "--json").out)["user"] == "carol@lab.example"
    job = record_as(None)
    assert _rows(cli)[0]["owner"] == "carol@lab.example" and _rows(cli)[0]["id"] == job
    assert cli("cancel", job).out.strip() == f"job {job} CANCELLED"  # one's own job: no --force


# --- ADC's account -------------------------------------------------------------------------------

def _service_account_key(tmp_path) -> Path:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path = tmp_path / "key.json"
    # A service account key file's fields, as IAM's keys.create returns them
    # (https://cloud.google.com/iam/docs/keys-create-delete).
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "p", "private_key_id": "k", "private_key": pem,
        "client_email": "trainer@p.iam.gserviceaccount.com", "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token"}))
    return path


def _user_login(tmp_path, account: str | None) -> Path:
    """gcloud's application_default_credentials.json for a user (authorized_user); newer gcloud
    writes the account too, older ones do not."""
    info = {"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"}
    if account is not None:
        info["account"] = account
    folder = tmp_path / "gcloud"
    folder.mkdir(exist_ok=True)
    path = folder / "application_default_credentials.json"
    path.write_text(json.dumps(info))
    return folder


def _google_auth_account(path: Path) -> str:
    """What google-auth itself says the file's account is, through the loader ADC uses for its
    type (google.auth._default; no network: nothing is refreshed)."""
    from google.oauth2 import credentials, service_account

    if json.loads(path.read_text())["type"] == "service_account":
        return service_account.Credentials.from_service_account_file(str(path)).service_account_email
    return credentials.Credentials.from_authorized_user_file(str(path)).account


def test_the_adc_account_is_what_google_auth_reads(tmp_path, monkeypatch):
    from tpujob.owners import adc_account

    key = _service_account_key(tmp_path)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    assert adc_account() == _google_auth_account(key) == "trainer@p.iam.gserviceaccount.com"
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    folder = _user_login(tmp_path, "ada@lab.example")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(folder))
    adc = folder / "application_default_credentials.json"
    assert adc_account() == _google_auth_account(adc) == "ada@lab.example"
    _user_login(tmp_path, None)
    assert adc_account() == _google_auth_account(adc) == ""


def test_the_owner_on_gcp_is_adcs_account_else_user_at_host(cli, tmp_path, monkeypatch, record_as):
    from tpujob.owners import current_user
    from tpujob.settings import load

    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("TPUJOB_CLOUD", "gcp")
    assert current_user(load()) == LOCAL_USER  # no ADC file at all
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(_service_account_key(tmp_path)))
    assert current_user(load()) == "trainer@p.iam.gserviceaccount.com"
    monkeypatch.setenv("TPUJOB_USER", "alice")  # the setting wins
    assert current_user(load()) == "alice"
    monkeypatch.delenv("TPUJOB_USER")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(_user_login(tmp_path, None)
                                                             / "application_default_credentials.json"))
    assert current_user(load()) == LOCAL_USER  # a user login naming no account: no network call
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(_service_account_key(tmp_path)))
    monkeypatch.setenv("TPUJOB_CLOUD", "local")  # the emulator has no ADC
    assert current_user(load()) == LOCAL_USER


def test_an_impersonating_adc_file_names_its_target():
    """`gcloud auth application-default login --impersonate-service-account` writes the target
    in service_account_impersonation_url (google/auth/external_account.py parses the same)."""
    from tpujob.owners import account_of

    url = ("https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/"
           "runner@p.iam.gserviceaccount.com:generateAccessToken")
    for kind in ("impersonated_service_account", "external_account"):
        info = {"type": kind, "service_account_impersonation_url": url}
        assert account_of(info) == "runner@p.iam.gserviceaccount.com"
    assert account_of({"type": "external_account"}) == ""  # workload identity without impersonation
    assert account_of({"type": "gdch_service_account"}) == ""
