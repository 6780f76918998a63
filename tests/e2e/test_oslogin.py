"""OS Login end to end on the emulator (`tpujob emulator oslogin on [--require] [--no-role]`):
a project with OS Login on ignores the `ssh-keys` metadata, so tpujob registers its key through
the OS Login API and logs in as the profile's POSIX user; `ssh_os_login: false` opts the nodes
out, which the organisation policy refuses under --require; hosts that refuse the key leave the
job as it is (a fact about the sweeping node, which says so with the cause and the fix), with
no second slice, and the job goes on once the node may log in."""

from __future__ import annotations

import json

import pytest
from reconcile_helpers import ZONE, host_root, record, resources, sweep_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def emulator_account(local_cloud) -> str:
    return local_cloud.status()["account"]


def test_job_runs_as_the_os_login_profiles_user_with_the_key_registered(cli, ctx, project, local_cloud, tmp_path):
    from tpujob.cloud.oslogin import GcpOsLogin
    from tpujob.hosts.keys import public_key_line

    assert cli("emulator", "oslogin", "on").code == 0  # the configured project: this test's
    job = record(ctx, tmp_path, command="echo ran as $USER > $HOME/who.txt")
    job = sweep_until(ctx, job.id, lambda j: j.state in ("SUCCEEDED", "FAILED"), timeout=90)
    events = "\n".join(e.message for e in ctx.store.events(job.id))
    assert job.state == "SUCCEEDED", events

    # The key is in the account's OS Login profile, and the login was the profile's POSIX user
    # (a service account's sa_<id>, never built from the email).
    oslogin = GcpOsLogin.for_emulator(local_cloud.url)
    profile = oslogin.login_profile(emulator_account(local_cloud), project)
    assert profile.holds(public_key_line(ctx.settings.home))
    assert profile.username.startswith("sa_")
    attempt = ctx.store.current_attempt(job.id)
    assert attempt.end_reason == "succeeded"


def test_os_login_user_is_the_one_the_hosts_see(cli, ctx, project, local_cloud, tmp_path):
    from tpujob.cloud.oslogin import GcpOsLogin

    assert cli("emulator", "oslogin", "on", "--project", project).code == 0
    job = record(ctx, tmp_path, command="echo ran as $USER > $HOME/who.txt; sleep 600")
    job = sweep_until(ctx, job.id, lambda j: j.state in ("RUNNING", "FAILED"), timeout=90)
    assert job.state == "RUNNING", [e.message for e in ctx.store.events(job.id)]
    user = GcpOsLogin.for_emulator(local_cloud.url).login_profile(emulator_account(local_cloud), project).username
    root = host_root(local_cloud, project, ZONE, ctx.store.current_attempt(job.id).slice_name, 0)
    who = root / "home" / user / "who.txt"
    sweep_until(ctx, job.id, lambda j: who.exists(), timeout=30)
    assert who.read_text().strip() == f"ran as {user}"
    assert not (root / "home" / ctx.settings.ssh_user).exists()  # the metadata user never logged in


def test_require_refuses_the_opt_out_with_the_org_policy_wording(cli, ctx, project, local_cloud, tmp_path,
                                                                   monkeypatch):
    assert cli("emulator", "oslogin", "on", "--require", "--project", project).code == 0
    monkeypatch.setenv("TPUJOB_SSH_OS_LOGIN", "false")
    job = record(ctx, tmp_path)
    assert cli("requeue", str(job.id)).code == 0
    shown = json.loads(cli("show", str(job.id), "--json").out)
    assert shown["state"] == "FAILED" and shown["end_reason"] == "user_error"
    said = "\n".join(e["message"] for e in shown["events"])
    assert "Constraint constraints/compute.requireOsLogin violated for project projects/" + project in said
    assert resources(local_cloud, project) == []  # nothing left to pay for


def test_opt_out_logs_in_with_the_metadata_key_while_the_project_has_os_login(cli, ctx, project, local_cloud,
                                                                              tmp_path, monkeypatch):
    assert cli("emulator", "oslogin", "on", "--project", project).code == 0
    monkeypatch.setenv("TPUJOB_SSH_OS_LOGIN", "false")
    job = record(ctx, tmp_path, command="true")
    job = sweep_until(ctx, job.id, lambda j: j.state in ("SUCCEEDED", "FAILED"), timeout=90)
    assert job.state == "SUCCEEDED", [e.message for e in ctx.store.events(job.id)]


def test_hosts_refusing_the_key_leave_the_job_alone_and_say_why(cli, ctx, project, local_cloud, tmp_path):
    # OS Login on, the key imports, but the account lacks roles/compute.osLogin: every host
    # answers SSH and refuses the login. Before: FAILED ssh_refused in one sweep, the slice
    # deleted; and earlier, "hosts unreachable" and a new slice after the grace. A refused login
    # is the sweeping node's problem: another node of the lab may well log in.
    assert cli("emulator", "oslogin", "on", "--no-role", "--project", project).code == 0
    job = record(ctx, tmp_path, max_preemptions=5, unhealthy_grace_seconds=1)
    swept = cli("requeue", str(job.id))
    assert swept.code == 0
    shown = json.loads(cli("show", str(job.id), "--json").out)
    said = "\n".join(e["message"] for e in shown["events"])
    assert shown["state"] == "SETTING_UP", said
    user = GcpUser(local_cloud, project)
    assert "this node" in swept.err and "cannot log in on the hosts" in swept.err
    assert f"hosts refused tpujob's SSH key for user {user}" in said
    assert f"OS Login is enabled on project {project}" in said
    assert "roles/compute.osLogin" in said and "left as it is" in said
    assert "unreachable" not in said
    assert [a["number"] for a in shown["attempts"]] == [1] and shown["preemptions"] == 0
    assert shown["failures"] == 0
    assert len(resources(local_cloud, project)) == 1  # the one slice, kept
    assert cli("requeue", str(job.id)).code == 0  # a second refusal: still untouched, said once
    again = json.loads(cli("show", str(job.id), "--json").out)
    assert again["state"] == "SETTING_UP"
    assert sum("cannot log in" in e["message"] for e in again["events"]) == 1
    # The role granted: the next sweeps set the job up on the same slice.
    assert cli("emulator", "oslogin", "on", "--project", project).code == 0
    job = sweep_until(ctx, job.id, lambda j: j.state in ("RUNNING", "FAILED"), timeout=90)
    assert job.state == "RUNNING" and job.attempt == 1, [e.message for e in ctx.store.events(job.id)]


def GcpUser(local_cloud, project) -> str:
    from tpujob.cloud.oslogin import GcpOsLogin

    return GcpOsLogin.for_emulator(local_cloud.url).login_profile(emulator_account(local_cloud), project).username


def test_a_running_jobs_hosts_refusing_the_key_leave_it_running(cli, ctx, project, local_cloud, tmp_path):
    # Running under OS Login; then the account loses roles/compute.osLogin. The next sweep's
    # status round is refused on every host: the job stays RUNNING on its slice (before: FAILED
    # ssh_refused at once), neither "unreachable" nor replaced, and the node says why.
    assert cli("emulator", "oslogin", "on", "--project", project).code == 0
    job = record(ctx, tmp_path, max_preemptions=5, unhealthy_grace_seconds=1)
    job = sweep_until(ctx, job.id, lambda j: j.state in ("RUNNING", "FAILED"), timeout=90)
    assert job.state == "RUNNING", [e.message for e in ctx.store.events(job.id)]
    assert cli("emulator", "oslogin", "on", "--no-role", "--project", project).code == 0
    assert cli("requeue", str(job.id)).code == 0
    assert cli("requeue", str(job.id)).code == 0  # past the unhealthy grace: still untouched
    shown = json.loads(cli("show", str(job.id), "--json").out)
    said = "\n".join(e["message"] for e in shown["events"])
    assert shown["state"] == "RUNNING" and shown["preemptions"] == 0 and shown["failures"] == 0, said
    assert f"hosts refused tpujob's SSH key for user {GcpUser(local_cloud, project)}" in said
    assert "hosts unreachable" not in said
    assert [a["end_reason"] for a in shown["attempts"]] == [None], said
    assert len(resources(local_cloud, project)) == 1


def test_a_stale_shared_read_of_the_project_is_retried_not_a_refusal(cli, ctx, project, local_cloud, tmp_path):
    # Another sweep read the project a moment ago, OS Login off (processes share that read for
    # ten minutes); then OS Login was turned on. The hosts refuse the metadata key: the sweep
    # reads the project again before that counts, and the next one logs in through OS Login.
    import time

    shared = ctx.settings.home / "cache" / "oslogin" / "local"
    shared.mkdir(parents=True)
    (shared / f"{project}.json").write_text(json.dumps({"read_at": time.time(), "enable_oslogin": None}))
    assert cli("emulator", "oslogin", "on", "--project", project).code == 0
    job = record(ctx, tmp_path, command="echo ran as $USER > $HOME/who.txt")
    job = sweep_until(ctx, job.id, lambda j: j.state in ("SUCCEEDED", "FAILED"), timeout=90)
    said = "\n".join(e.message for e in ctx.store.events(job.id))
    assert job.state == "SUCCEEDED", said
    assert "setup will be retried: hosts refused tpujob's SSH key (setup on host 0: host 0 " in said
    assert (f"SSH authentication as 'tpujob' refused: Authentication failed.): the login followed another "
            f"process's read of project {project}'s OS Login setting, and a fresh read says otherwise") in said
    assert [a.end_reason for a in ctx.store.attempts(job.id)] == ["succeeded"], said
    assert json.loads((shared / f"{project}.json").read_text())["enable_oslogin"] is True


def test_a_sweep_after_another_takes_its_read_and_imports_no_compute_client(ctx, project, local_cloud, tmp_path):
    # A cron sweep is a new process each minute: it takes the last one's read of the project
    # (ten minutes), and so never imports google-cloud-compute (two CPU-seconds) to log in to
    # the hosts: here, to learn that the program exited.
    import os
    import subprocess
    import sys
    import time

    job = record(ctx, tmp_path, command="while [ ! -e $HOME/stop ]; do sleep 0.1; done")
    job = sweep_until(ctx, job.id, lambda j: j.state in ("RUNNING", "FAILED"), timeout=90)
    assert job.state == "RUNNING", [e.message for e in ctx.store.events(job.id)]
    shared = ctx.settings.home / "cache" / "oslogin" / "local" / f"{project}.json"
    read = json.loads(shared.read_text())
    root = host_root(local_cloud, project, ZONE, ctx.store.current_attempt(job.id).slice_name, 0)
    (root / "home" / ctx.settings.ssh_user / "stop").write_text("")
    exit_code = root / "home" / ctx.settings.ssh_user / ".tpujob" / "jobs" / f"{job.id:06d}" / "attempt-1" / "exit_code"
    deadline = time.monotonic() + 120  # the program's exit, waited for; the deadline bounds a hang
    while not exit_code.exists():
        assert time.monotonic() < deadline, "the program never exited"
        time.sleep(0.1)
    probe = ("import json, sys\nfrom tpujob.cli.main import main\ncode = main(['requeue', sys.argv[1]])\n"
             "print(json.dumps({'code': code, 'compute': sorted(m for m in sys.modules if 'compute_v1' in m)}))")
    done = subprocess.run([sys.executable, "-c", probe, str(job.id)], env=dict(os.environ), capture_output=True,
                          text=True, timeout=120)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"code": 0, "compute": []}, done.stderr[-2000:]
    assert ctx.store.get(job.id).state == "SUCCEEDED", [e.message for e in ctx.store.events(job.id)]
    assert json.loads(shared.read_text()) == read  # taken, not read again
