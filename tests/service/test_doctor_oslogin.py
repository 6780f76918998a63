"""`tpujob doctor`'s OS Login check against the shared emulator: off, on (key not registered
yet, then registered, with the POSIX user), and the opt-out's warning about the org policy."""

from __future__ import annotations

import json
import uuid

import pytest


@pytest.fixture
def oslogin_project(monkeypatch, local_cloud, no_sweeper):
    name = f"dr-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("TPUJOB_PROJECT", name)
    return name


@pytest.fixture
def no_sweeper(monkeypatch):
    """This store has no crontab line (the real crontab is left alone)."""
    from tpujob.service import cron

    monkeypatch.setattr(cron, "installed", lambda: None)


def check(cli) -> dict:
    result = cli("doctor", "--json")
    data = json.loads(result.out)
    return next(c for c in data["cloud"] if c["name"] == "os login")


def test_off_says_who_logs_in_with_the_metadata_key(cli, oslogin_project):
    found = check(cli)
    assert found["status"] == "ok"
    assert found["detail"] == (f"off in project {oslogin_project}: tpujob logs in as tpujob with the key in "
                               "the nodes' ssh-keys metadata")


def test_on_reports_the_profile_the_user_and_whether_the_key_is_registered(cli, oslogin_project, local_cloud,
                                                                         tpujob_home):
    from tpujob.cloud.oslogin import GcpOsLogin
    from tpujob.hosts.keys import public_key_line

    local_cloud.oslogin(oslogin_project, True)
    account = local_cloud.status()["account"]
    found = check(cli)
    assert found["status"] == "ok", found
    assert f"on in project {oslogin_project}: tpujob's key is not registered yet" in found["detail"]
    assert account in found["detail"]
    client = GcpOsLogin.for_emulator(local_cloud.url)
    user = client.import_key(account, oslogin_project, public_key_line(tpujob_home), 600).username
    found = check(cli)
    assert f"tpujob's key is registered in the OS Login profile of {account}; it logs in as {user}" in found["detail"]
    assert "enable-oslogin FALSE" in found["detail"]  # what the opt-out would do
    # Mounts and cleanup use sudo: roles/compute.osAdminLogin, said before a setup fails.
    assert "needs roles/compute.osAdminLogin" in found["detail"]


def test_the_opt_out_in_a_project_with_os_login_warns_of_the_org_policy(cli, oslogin_project, local_cloud,
                                                                       monkeypatch):
    local_cloud.oslogin(oslogin_project, True)
    monkeypatch.setenv("TPUJOB_SSH_OS_LOGIN", "false")
    found = check(cli)
    assert found["status"] == "warning"
    assert "nodes are created with enable-oslogin FALSE" in found["detail"]
    assert "constraints/compute.requireOsLogin" in found["detail"]
    assert found["fix"] == "tpujob config set ssh_os_login true"
