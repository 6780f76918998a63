"""`tpujob cron`: against a stand-in `crontab` (conftest's stand_in_crontab) whose table is a file
of the test's own, never the invoking user's."""

from __future__ import annotations

import fcntl
import json
import re
import shlex
import subprocess

import pytest
import typer
from typer.testing import CliRunner

from tpujob.cli import cron as cron_cli
from tpujob.errors import ConfigError, UsageError
from tpujob.service import cron

OTHER = "17 3 * * * /usr/bin/true # someone else's line"


@pytest.fixture
def crontab(stand_in_crontab):
    """A crontab holding someone else's line first."""
    cron.write_crontab(OTHER + "\n")
    return stand_in_crontab


@pytest.mark.parametrize("every, schedule", [("1m", "* * * * *"), ("5m", "*/5 * * * *"), ("59m", "*/59 * * * *"),
                                             ("1h", "0 * * * *"), ("6h", "0 */6 * * *")])
def test_schedules(every, schedule):
    assert cron.schedule_of(every) == schedule


@pytest.mark.parametrize("every", ["0m", "60m", "24h", "5", "5s", "m", "-1m"])
def test_bad_schedules_are_refused(every):
    with pytest.raises(UsageError):
        cron.schedule_of(every)


@pytest.fixture(autouse=True)
def no_ca_settings(monkeypatch):
    """The line carries OpenSSL's CA settings when the installing shell has them: not here."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


def test_line_carries_absolute_paths_and_settings(tpujob_home, monkeypatch):
    monkeypatch.setenv("TPUJOB_CLOUD", "gcp")
    monkeypatch.setenv("TPUJOB_DB_URL", "postgresql://u@db/tpujob")
    e = cron.entry("10m", python="/opt/py env/bin/python")
    home = tpujob_home.resolve()
    assert e.line.startswith("*/10 * * * * ") and e.line.endswith(f"# tpujob-requeue home={home}")
    words = shlex.split(e.command)
    assert words[:3] == [f"TPUJOB_HOME={home}", "TPUJOB_DB_URL=postgresql://u@db/tpujob", "TPUJOB_CLOUD=gcp"]
    assert words[3:8] == ["/usr/bin/flock", "-n", str(home / "requeue.lock"), "/opt/py env/bin/python", "-m"]
    # The sweep follows the setups it starts for most of the interval (the lock then free again).
    assert words[8:12] == ["tpujob.cli.main", "requeue", "--settle", "480"]
    assert words[-3:] == [">>", str(home / "logs" / "requeue.log"), "2>&1"]


@pytest.mark.parametrize("every, settle", [("1m", 48.0), ("5m", 240.0), ("20m", 900.0), ("2h", 900.0)])
def test_a_cron_sweep_follows_setups_for_most_of_its_interval(every, settle):
    assert cron.settle_seconds(every) == settle


def test_line_carries_every_setting_the_sweep_reads(tpujob_home, monkeypatch):
    """Under cron a sweep sees only what the line carries: a job created as TPUJOB_SSH_USER=alice
    must be reached as alice by the unattended sweep too."""
    from tpujob import settings as settings_mod

    values = {"TPUJOB_SSH_USER": "alice", "TPUJOB_PROJECT": "my-proj", "TPUJOB_ZONE": "us-central2-b",
              "TPUJOB_LEASE_SECONDS": "900", "TPUJOB_SWEEP_WORKERS": "4", "TPUJOB_EMULATOR_DIR": "/srv/emu dir",
              "SSL_CERT_FILE": "/etc/lab/ca.pem"}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    words = shlex.split(cron.entry("5m", python="/usr/bin/python3").command)
    carried = dict(w.split("=", 1) for w in words[:words.index("/usr/bin/flock")])
    assert carried == {"TPUJOB_HOME": str(tpujob_home.resolve()), **values}
    # Every setting the settings module reads from TPUJOB_* is among those carried.
    assert {f"TPUJOB_{k.upper()}" for k in settings_mod.KEYS} <= set(cron.CARRIED)
    # Under `env -i`, the line's own assignments give the sweep these settings.
    prefix = cron.entry("5m").command.split(" /usr/bin/flock ")[0]
    seen = subprocess.run(["env", "-i", "/bin/sh", "-c", prefix + " /usr/bin/env"],
                          capture_output=True, text=True).stdout.splitlines()
    assert "TPUJOB_SSH_USER=alice" in seen and "TPUJOB_EMULATOR_DIR=/srv/emu dir" in seen


def test_a_percent_sign_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("TPUJOB_HOME", str(tmp_path / "50%"))
    with pytest.raises(ConfigError):
        cron.entry()


def test_install_is_idempotent_remove_keeps_other_lines(crontab, tpujob_home):
    first = cron.install("5m")
    assert (tpujob_home / "logs").is_dir()
    cron.install("5m")
    cron.install("15m")
    lines = cron.read_crontab().splitlines()
    assert lines[0] == OTHER and len(lines) == 2 and lines[1].startswith("*/15 ")
    # The same command but for the interval's settle time (of 15 minutes, not 5).
    assert cron.installed() == lines[1] and first.command.replace("--settle 240", "--settle 720") in lines[1]
    assert cron.remove() is True
    assert cron.read_crontab().splitlines() == [OTHER]
    assert cron.remove() is False and cron.installed() is None


def test_the_table_written_is_the_stand_in_s_not_the_user_s(crontab, tpujob_home):
    cron.install("5m")
    assert crontab.read_text().splitlines() == [OTHER, cron.installed()]


def test_a_line_crontab_would_refuse_is_refused(crontab):
    """The stand-in checks each line as the real program does: a line tpujob writes that cron
    could not read fails here as it would on the machine."""
    with pytest.raises(ConfigError, match="bad minute"):
        cron.write_crontab("every-5m /usr/bin/true\n")
    assert crontab.read_text() == OTHER + "\n"


def test_cli_install_show_remove(crontab, tpujob_home):
    app = typer.Typer()
    cron_cli.register(app)
    runner = CliRunner()
    result = runner.invoke(app, ["cron", "install", "--every", "2h"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].startswith("0 */2 * * * ")
    (tpujob_home / "logs" / "requeue.log").write_text("sweep: 0 active\nsweep: 1 active\n")
    shown = json.loads(runner.invoke(app, ["cron", "show", "--json"]).output)
    assert shown["line"].startswith("0 */2 ") and shown["log_tail"] == ["sweep: 0 active", "sweep: 1 active"]
    assert "sweep: 1 active" in runner.invoke(app, ["cron", "show"]).output
    assert runner.invoke(app, ["cron", "remove"]).output.strip() == "removed"
    assert "no tpujob line" in runner.invoke(app, ["cron", "show"]).output
    assert runner.invoke(app, ["cron", "install", "--every", "90m"]).exit_code != 0


def test_cli_does_not_print_the_database_password(crontab, tpujob_home, monkeypatch):
    monkeypatch.setenv("TPUJOB_DB_URL", "postgresql://alice:s3cr3t-pw@db.example.org/lab")
    app = typer.Typer()
    cron_cli.register(app)
    runner = CliRunner()
    installed = runner.invoke(app, ["cron", "install"])
    shown = runner.invoke(app, ["cron", "show", "--json"])
    assert installed.exit_code == 0 and shown.exit_code == 0
    for output in (installed.output, shown.output, runner.invoke(app, ["cron", "show"]).output):
        assert "s3cr3t-pw" not in output
    assert f"is in {tpujob_home.resolve() / 'cron.env'} (mode 600)" in installed.output


def test_a_store_password_is_kept_out_of_the_crontab_in_a_private_file(crontab, tpujob_home, monkeypatch):
    """A crontab is read by root, backups and cron's mail: the line sources the store's URL from
    $TPUJOB_HOME/cron.env, mode 600, and the sweep still sees it under cron's bare environment."""
    url = "postgresql://alice:s3cr3t-pw@db.example.org/lab"
    monkeypatch.setenv("TPUJOB_DB_URL", url)
    monkeypatch.setenv("TPUJOB_CLOUD", "gcp")
    cron.install("5m")
    line = cron.installed()
    assert "s3cr3t-pw" not in cron.read_crontab() and "TPUJOB_CLOUD=gcp" in line
    env_file = tpujob_home.resolve() / "cron.env"
    assert env_file.stat().st_mode & 0o777 == 0o600
    # What cron runs, under `env -i`, with the sweep replaced by printing what it would see.
    command = line[len("*/5 * * * * "):line.index(" # tpujob-requeue")]
    probe = re.sub(f"{cron.FLOCK} .*?; }}", "/usr/bin/env; }", command)
    subprocess.run(["env", "-i", "/bin/sh", "-c", probe], check=True, timeout=60)
    seen = (tpujob_home / "logs" / "requeue.log").read_text().splitlines()
    assert f"TPUJOB_DB_URL={url}" in seen and "TPUJOB_CLOUD=gcp" in seen
    # A store URL without a password needs no file; the old one is not left behind.
    monkeypatch.setenv("TPUJOB_DB_URL", "postgresql://alice@db.example.org/lab")
    cron.install("5m")
    assert "TPUJOB_DB_URL=postgresql://alice@db.example.org/lab" in cron.installed()
    assert not env_file.exists()


@pytest.mark.slow
def test_the_installed_line_sweeps_from_a_bare_environment(crontab, tpujob_home, local_cloud, tmp_path):
    """What cron runs: the command part of the installed line, under `env -i` (no PATH, no HOME)."""
    from tpujob.service import jobs
    from tpujob.service.context import Context

    spec = tmp_path / "job.yaml"
    spec.write_text("name: cronjob\ntpu: {accelerator: v4-8, zone: us-central2-b, queued: false}\n"
                    "run: {command: 'sleep 600'}\n")
    ctx = Context.load()
    job, _ = jobs.record(ctx, str(spec))
    cron.install("5m")
    line = cron.installed()
    command = line[len("*/5 * * * * "):]
    result = subprocess.run(["env", "-i", "/bin/sh", "-c", command], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    log = (tpujob_home / "logs" / "requeue.log").read_text()
    assert re.match(r"\d{4}-\d\d-\d\dT\S+ sweep: 1 active, 1 acted on", log), log
    swept = ctx.store.get(job.id)
    # The node's create returns it READY: set up and launched in the same sweep.
    assert (swept.state, swept.attempt) == ("RUNNING", 1)
    # A second sweep while the lock is held is skipped, not queued behind it.
    with open(tpujob_home / "requeue.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        skipped = subprocess.run(["env", "-i", "/bin/sh", "-c", command], capture_output=True, timeout=60)
    assert skipped.returncode == 1
    assert (tpujob_home / "logs" / "requeue.log").read_text() == log
    jobs.delete(ctx, str(job.id))
