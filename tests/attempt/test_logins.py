"""Who tpujob logs in as (attempt/logins.py), with a stand-in for the OS Login client: the
project's enable-oslogin and the node's override, the key imported once per project and
renewed at half its expiry, the profile's POSIX user, and the words of a refusal."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from tpujob.attempt.logins import KEY_TTL_SECONDS, Login, Logins
from tpujob.cloud.oslogin import Profile, effective, metadata_flag, posix_username
from tpujob.errors import ConfigError, PermissionDenied, SshAuthRefused, UsageError
from tpujob.settings import Settings

KEY = "ssh-ed25519 AAAAkey tpujob"


@dataclass
class FakeOsLogin:
    enabled: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)
    refuse: Exception | None = None

    def project_enabled(self, project):
        self.calls.append(("project", project))
        return self.enabled.get(project)

    def import_key(self, account, project, line, ttl):
        self.calls.append(("import", account, project, line, ttl))
        if self.refuse:
            raise self.refuse
        return Profile("sa_123", (" ".join(line.split()[:2]),))


def logins(client, os_login="true", clock=lambda: 1000.0):
    return Logins(Settings(ssh_os_login=os_login), lambda: KEY, client=client, account="me@p.iam.gserviceaccount.com",
                  clock=clock)


def test_a_project_without_os_login_logs_in_as_ssh_user_and_imports_nothing():
    client = FakeOsLogin()
    login = logins(client).for_slice("p", {})
    assert login == Login("tpujob", False, "p")
    assert [c[0] for c in client.calls] == ["project"]


def test_os_login_on_imports_the_key_once_and_logs_in_as_the_profiles_user():
    client = FakeOsLogin(enabled={"p": True})
    found = logins(client)
    first, second = found.for_slice("p", {}), found.for_slice("p", {})
    assert first == second == Login("sa_123", True, "p", "me@p.iam.gserviceaccount.com")
    imports = [c for c in client.calls if c[0] == "import"]
    assert imports == [("import", "me@p.iam.gserviceaccount.com", "p", KEY, KEY_TTL_SECONDS)]
    assert [c for c in client.calls if c[0] == "project"] == [("project", "p")]  # asked once


def test_workers_asking_at_once_wait_for_one_read_of_the_project():
    # A sweep's workers (and SshHostOps.prepare's thread) meet at the first setup: one read.
    import threading
    import time

    class SlowOsLogin(FakeOsLogin):
        def project_enabled(self, project):
            time.sleep(0.2)
            return super().project_enabled(project)

    client = SlowOsLogin()
    found = logins(client)
    threads = [threading.Thread(target=found.for_slice, args=("p", {})) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert client.calls == [("project", "p")]


def test_the_key_is_imported_again_once_half_its_expiry_has_passed():
    client, now = FakeOsLogin(enabled={"p": True}), [1000.0]
    found = logins(client, clock=lambda: now[0])
    found.for_slice("p", {})
    now[0] += KEY_TTL_SECONDS / 2 + 1
    found.for_slice("p", {})
    assert len([c for c in client.calls if c[0] == "import"]) == 2


def test_the_nodes_own_enable_oslogin_overrides_the_project_without_asking_it():
    client = FakeOsLogin(enabled={"p": True})
    login = logins(client).for_slice("p", {"enable-oslogin": "FALSE"})
    assert login.user == "tpujob" and not login.os_login and login.node_says == "FALSE"
    assert client.calls == []
    assert logins(FakeOsLogin()).for_slice("q", {"enable-oslogin": "TRUE"}).user == "sa_123"


def test_a_refused_import_is_an_ssh_refusal_naming_the_role_and_the_opt_out():
    client = FakeOsLogin(enabled={"p": True}, refuse=PermissionDenied("Permission denied on resource"))
    with pytest.raises(SshAuthRefused) as caught:
        logins(client).for_slice("p", {})
    said = str(caught.value)
    assert "refused to register tpujob's SSH key for me@p.iam.gserviceaccount.com" in said
    assert "roles/compute.osLogin" in said and "ssh_os_login false" in said


def test_the_opt_out_puts_enable_oslogin_false_on_new_nodes():
    assert logins(FakeOsLogin(), os_login="false").node_metadata() == {"enable-oslogin": "FALSE"}
    assert logins(FakeOsLogin()).node_metadata() == {}


def test_refusal_words_say_the_cause_and_the_fix():
    on = Login("sa_1", True, "p", "me@x").refusal("host 0: Authentication failed.")
    assert on.startswith("hosts refused tpujob's SSH key for user sa_1: OS Login is enabled on project p")
    assert "(host 0: Authentication failed.)" in on and "roles/compute.osLogin" in on
    assert "constraints/compute.requireOsLogin" in on
    off = Login("tpujob", False, "p").refusal("host 0: Authentication failed.")
    assert "OS Login is off on project p" in off and "ssh-keys" in off


@pytest.mark.parametrize("value, flag", [(None, None), ("TRUE", True), ("true", True), ("FALSE", False),
                                         ("false", False), ("1", False), ("", False)])
def test_enable_oslogin_reads_as_gcloud_reads_it(value, flag):
    assert metadata_flag(value) is flag


def test_effective_node_first_then_project():
    assert effective(None, True) and not effective(None, None) and not effective("FALSE", True)
    assert effective("TRUE", None)


def test_posix_username_primary_else_first_else_none():
    acct = lambda name, primary=False: SimpleNamespace(username=name, primary=primary)  # noqa: E731
    assert posix_username(SimpleNamespace(posix_accounts=[acct("a"), acct("b", True)])) == "b"
    assert posix_username(SimpleNamespace(posix_accounts=[acct("a"), acct("b")])) == "a"
    assert posix_username(SimpleNamespace(posix_accounts=[])) == ""


def test_ssh_os_login_setting_is_validated(tpujob_home, monkeypatch):
    from tpujob import settings

    with pytest.raises(UsageError):
        settings.set_value("ssh_os_login", "maybe")
    assert settings.set_value("ssh_os_login", "false").os_login_opt_out
    monkeypatch.setenv("TPUJOB_SSH_OS_LOGIN", "no")
    with pytest.raises(ConfigError):
        settings.load()


def test_validate_says_the_org_policy_may_refuse_the_opt_out(cli, spec_file, monkeypatch):
    spec = spec_file('name: j\ntpu: {accelerator: v4-8, zone: us-central2-b}\nrun:\n  command: "true"\n')
    assert "enable-oslogin" not in cli("validate", spec).err
    monkeypatch.setenv("TPUJOB_SSH_OS_LOGIN", "false")
    result = cli("validate", spec)
    assert result.code == 0
    assert ("warning: ssh_os_login false: the job's nodes are created with enable-oslogin FALSE; an organisation "
            "policy (constraints/compute.requireOsLogin) may refuse") in result.err


def test_a_look_only_login_reads_the_profile_and_imports_nothing():
    @dataclass
    class Reading(FakeOsLogin):
        held: tuple = ()

        def login_profile(self, account, project):
            self.calls.append(("profile", account, project))
            return Profile("sa_123", self.held)

    client = Reading(enabled={"p": True})
    found = Logins(Settings(), lambda: KEY, client=client, account="me@x", register=False)
    with pytest.raises(SshAuthRefused):
        found.for_slice("p", {})
    client.held = ("ssh-ed25519 AAAAkey",)
    assert found.for_slice("p", {}).user == "sa_123"
    assert not [c for c in client.calls if c[0] == "import"]


def test_expired_credentials_are_not_a_refusal_the_next_sweep_retries():
    from tpujob.errors import AuthError

    client = FakeOsLogin(enabled={"p": True}, refuse=AuthError("Request had invalid authentication credentials."))
    with pytest.raises(AuthError) as caught:
        logins(client).for_slice("p", {})
    assert not isinstance(caught.value, SshAuthRefused)


def test_a_read_of_the_project_is_shared_with_later_processes_for_its_ttl(tmp_path):
    # A cron sweep is a new process each minute: the first reads the project, the next ones
    # within PROJECT_TTL_SECONDS take its read (the read costs google-cloud-compute's import).
    from tpujob.attempt.logins import PROJECT_TTL_SECONDS

    now = [1000.0]

    def process(client):
        return Logins(Settings(), lambda: KEY, client=client, account="me@x", clock=lambda: now[0],
                      shared=tmp_path / "oslogin")

    first, second = FakeOsLogin(enabled={"p": True}), FakeOsLogin()
    assert process(first).for_slice("p", {}) == Login("sa_123", True, "p", "me@x")
    login = process(second).for_slice("p", {})
    assert login == Login("sa_123", True, "p", "me@x") and not login.confirmed
    assert [c[0] for c in second.calls] == ["import"]  # the project was not asked again
    now[0] += PROJECT_TTL_SECONDS + 1
    third = FakeOsLogin(enabled={"p": False})
    assert process(third).for_slice("p", {}) == Login("tpujob", False, "p")
    assert third.calls == [("project", "p")]


def test_a_refusal_under_a_shared_read_reads_the_project_again_before_it_counts(tmp_path):
    # Another process read "off" a minute ago; OS Login is on now. The hosts' refusal of the
    # metadata key is that read's, not the job's: confirm says so (None), and the next login
    # follows the fresh read. Under a read that still holds, the refusal stands.
    def process(client):
        return Logins(Settings(), lambda: KEY, client=client, account="me@x", shared=tmp_path / "oslogin")

    process(FakeOsLogin(enabled={"p": False})).for_slice("p", {})
    now_on = FakeOsLogin(enabled={"p": True})
    found = process(now_on)
    stale = found.for_slice("p", {})
    assert (stale.user, stale.os_login, stale.confirmed) == ("tpujob", False, False)
    assert found.confirm(stale, {}) is None
    assert found.for_slice("p", {}) == Login("sa_123", True, "p", "me@x")
    assert process(FakeOsLogin()).for_slice("p", {}).os_login  # the fresh read is the shared one now

    still_on = FakeOsLogin(enabled={"p": True})
    held = process(still_on)
    login = held.for_slice("p", {})
    assert not login.confirmed and held.confirm(login, {}) == login
    assert [c for c in still_on.calls if c[0] == "project"] == [("project", "p")]  # read once, to confirm
    assert held.confirm(Login("tpujob", False, "p", node_says="FALSE"), {"enable-oslogin": "FALSE"}) is not None


def test_a_shared_read_that_cannot_be_read_is_no_read(tmp_path):
    shared = tmp_path / "oslogin"
    shared.mkdir()
    (shared / "p.json").write_text("{not json")
    client = FakeOsLogin(enabled={"p": False})
    Logins(Settings(), lambda: KEY, client=client, account="me@x", shared=shared).for_slice("p", {})
    assert client.calls == [("project", "p")]
    assert json.loads((shared / "p.json").read_text())["enable_oslogin"] is False
