"""The store and the credentials as an unlucky user meets them: a damaged or read-only store file,
a migration (with the copy kept before it), and Application Default Credentials whose refresh
token expired. Each ends in one line that says what is wrong and how to recover."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
from spec_texts import dedent_spec
from ui_browser import TOKEN, Browser, logged_in

from tpujob.store import migrations
from tpujob.store.migrations import MIGRATIONS
from tpujob.store.states import State

LATEST = MIGRATIONS[-1][0]


@pytest.fixture
def job(spec_file):
    """A job recorded (the store made, at the latest version), preempted once: it has an
    attempt, and a run dir on Cloud Storage that `show` and the job page read."""
    from tpujob.service import jobs
    from tpujob.service.context import Context

    ctx = Context.load()
    recorded, _ = jobs.record(ctx, str(spec_file(dedent_spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: python train.py}
        run_dir: gs://demo-bucket/runs
        """))))
    ctx.store.start_attempt(recorded.id, State.PENDING, State.PROVISIONING, "go", zone="us-central2-b",
                            accelerator="v4-8", queued=False)
    ctx.store.transition(recorded.id, State.PROVISIONING, State.RECOVERING, "preempted", preemptions=1)
    return recorded


def _next_process(monkeypatch) -> None:
    """The next command opens the store afresh, as a new process does (not this one's engine,
    whose connections outlive what happens to the file under them)."""
    from tpujob.store import db

    for engine in db._engines.values():
        engine.dispose()
    monkeypatch.setattr(db, "_engines", {})


def _damage(path, monkeypatch) -> None:
    _next_process(monkeypatch)
    path.write_bytes(b"not a SQLite file, a disk's bad day " * 200)
    for extra in ("-wal", "-shm"):
        path.with_name(path.name + extra).unlink(missing_ok=True)


# -- a damaged store -----------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["list"], ["show", "1"], ["cancel", "1"]])
def test_a_damaged_store_says_so_and_how_to_recover(cli, job, tpujob_home, command, monkeypatch):
    db = tpujob_home / "tpujob.db"
    _damage(db, monkeypatch)
    result = cli(*command)
    assert result.code == 6
    assert result.error_line == (
        f"error: the store {db} is damaged (file is not a database): move it aside, "
        f"`mv {db} {db}.damaged` (its -wal and -shm files too, if any), then the next command starts an "
        f"empty store (`sqlite3 {db}.damaged .recover` may save its rows)")


# -- a backup before each migration --------------------------------------------------------------

def _new_migration(monkeypatch, apply) -> None:
    """A release with one migration more than this store has, run by the next command."""
    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS + [(LATEST + 1, "the next release", apply)])
    _next_process(monkeypatch)


def test_a_migration_keeps_a_private_copy_of_the_store_named_with_its_version(cli, job, tpujob_home, monkeypatch):
    import sqlite3

    assert [p.name for p in tpujob_home.iterdir() if ".bak" in p.name] == []  # a new store: nothing to keep
    _new_migration(monkeypatch, lambda conn: conn.exec_driver_sql("CREATE TABLE next_release (x INTEGER)"))
    assert cli("list").code == 0
    backup = tpujob_home / f"tpujob.db.v{LATEST}.bak"
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert sorted(p.name for p in tpujob_home.iterdir() if ".bak" in p.name) == [backup.name]
    with sqlite3.connect(backup) as kept:
        assert kept.execute("SELECT name, state FROM job").fetchall() == [("demo", "RECOVERING")]
        assert kept.execute("SELECT max(version) FROM tpujob_migration").fetchone() == (LATEST,)
        assert not kept.execute("SELECT 1 FROM sqlite_master WHERE name = 'next_release'").fetchall()
    assert sorted(p.name for p in tpujob_home.iterdir() if ".bak" in p.name) == [backup.name]  # read, no WAL

    # A later damage names the copy to go back to.
    _damage(tpujob_home / "tpujob.db", monkeypatch)
    result = cli("list")
    assert result.code == 6
    assert result.error_line.endswith(f"then copy back its newest backup, `cp {backup} {tpujob_home / 'tpujob.db'}`")


def test_a_failed_migration_says_where_the_copy_from_before_it_is(cli, job, tpujob_home, monkeypatch):
    def broken(conn):
        raise RuntimeError("a migration that fails half way")

    _new_migration(monkeypatch, broken)
    result = cli("list")
    backup = tpujob_home / f"tpujob.db.v{LATEST}.bak"
    assert result.code == 6
    assert result.error_line == (
        f"error: migrating the store 'sqlite:///{tpujob_home / 'tpujob.db'}' failed (a migration that fails "
        f"half way); its copy from before the migration is {backup}")
    assert backup.exists()


# -- a read-only store ---------------------------------------------------------------------------

@pytest.fixture
def read_only(tpujob_home, monkeypatch, tmp_path):
    """The store opened read-only (SQLite's mode=ro: the tests may run as root, whom a file's
    mode does not stop)."""
    monkeypatch.chdir(tmp_path)
    _next_process(monkeypatch)
    monkeypatch.setenv("TPUJOB_DB_URL", f"sqlite:///file:{tpujob_home / 'tpujob.db'}?mode=ro&uri=true")
    return tpujob_home / "tpujob.db"


def test_a_read_only_store_is_one_line_not_the_sql(cli, job, read_only):
    result = cli("cancel", "1")
    assert result.code == 6
    home = read_only.parent
    assert result.error_line == (
        f"error: the store {read_only} is read-only (attempt to write a readonly database): tpujob writes it "
        f"and its directory on every change; check their owner and mode with `ls -ld {home} {read_only}`")


def test_doctor_checks_that_the_store_takes_a_write(cli, job, read_only, monkeypatch):
    result = cli("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(result.out)["local"]}
    assert checks["store"]["status"] == "error"
    assert checks["store"]["detail"].startswith(f"the store {read_only} is read-only")
    assert result.code == 6
    monkeypatch.delenv("TPUJOB_DB_URL")
    checks = {c["name"]: c for c in json.loads(cli("doctor", "--json").out)["local"]}
    assert checks["store"]["status"] == "ok" and checks["store"]["detail"].endswith("1 active job, writable")


# -- credentials that expired --------------------------------------------------------------------

# Google's OAuth token endpoint as it answers a refresh token that expired or was revoked: 400
# with `invalid_grant` (RFC 6749 section 5.2), the description google-auth puts in its
# RefreshError (as quoted in googleworkspace/python-samples issue 1644).
INVALID_GRANT = json.dumps({"error": "invalid_grant", "error_description": "Token has been expired or revoked."})


@pytest.fixture
def expired_adc(tmp_path, monkeypatch, stand_in):
    """`gcloud auth application-default login`'s file, its refresh token no longer good, and
    tpujob set to Google. google-auth sends such a file's refresh to Google's token endpoint
    whatever the file says (`from_authorized_user_info`): the tests point that constant at the
    loopback stand-in above (its URL + /token), so nothing leaves the machine."""
    endpoint = stand_in(lambda request: (400, INVALID_GRANT.encode(), {"Content-Type": "application/json"}))
    adc = tmp_path / "application_default_credentials.json"
    adc.write_text(json.dumps({"type": "authorized_user", "client_id": "id.apps.googleusercontent.com",
                               "client_secret": "secret", "refresh_token": "1//expired"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    monkeypatch.setenv("TPUJOB_CLOUD", "gcp")
    monkeypatch.setenv("TPUJOB_PROJECT", "demo-project")
    monkeypatch.setattr("google.oauth2.credentials._GOOGLE_OAUTH2_TOKEN_ENDPOINT", f"{endpoint.url}/token")
    return endpoint


FIX = "run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"


def test_show_says_the_credentials_expired_and_the_fix(cli, job, expired_adc):
    result = cli("show", "1")
    assert result.code == 0, result.err
    assert expired_adc.asked >= 1
    assert "run dir: not readable: listing gs://demo-bucket/runs/: Google credentials not usable (invalid_grant: " \
           f"Token has been expired or revoked.); {FIX}" in result.out.splitlines()
    assert "RECOVERING" in result.out  # the rest of the job is shown


# `tpujob ui` in a process of its own, Google's token endpoint pointed at the stand-in first.
_SERVE = """
import sys
import google.oauth2.credentials
google.oauth2.credentials._GOOGLE_OAUTH2_TOKEN_ENDPOINT = sys.argv[1]
from tpujob.cli.main import main
sys.exit(main(["ui", "--port", "0", "--token", sys.argv[2]]))
"""


def test_a_google_error_no_typed_error_wraps_is_still_one_line_with_the_fix(cli, job, monkeypatch):
    from google.auth.exceptions import RefreshError

    from tpujob.service import jobs

    def expired(ctx, ref):
        raise RefreshError("invalid_grant: Token has been expired or revoked.",
                           {"error": "invalid_grant", "error_description": "Token has been expired or revoked."})

    monkeypatch.setattr(jobs, "show", expired)
    result = cli("show", "1")
    assert result.code == 6
    assert result.error_line == ("error: Google credentials expired or revoked (invalid_grant: Token has been "
                                 f"expired or revoked.); {FIX}")

    def multiline(ctx, ref):
        raise ValueError("the first line\nand the statement after it")

    monkeypatch.setattr(jobs, "show", multiline)
    result = cli("show", "1")
    assert result.code == 1
    assert result.error_line == ("error: unexpected ValueError: the first line "
                                 "(run with --debug for the traceback)")


def test_the_job_page_says_the_credentials_expired_and_still_shows_the_job(job, expired_adc):
    proc = subprocess.Popen([sys.executable, "-c", _SERVE, f"{expired_adc.url}/token", TOKEN], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        first = proc.stdout.readline()
        assert first.startswith("tpujob ui: serving"), first + proc.stderr.read()
        url = proc.stdout.readline().strip()
        browser = logged_in((url, Browser(urlsplit(url).port)))
        status, _, page = browser.get("/jobs/1")
        assert status == 200, page
        assert expired_adc.asked >= 1
        assert "Google credentials not usable (invalid_grant: Token has been expired or revoked.); " \
               "run `gcloud auth application-default login`" in page
        assert "RECOVERING" in page and "preempted" in page  # the rest of the page
    finally:
        proc.terminate()
        proc.wait(10)
