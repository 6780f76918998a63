"""The emulated OS Login v1 subset and the policy around it, through Google's own clients
(google-cloud-os-login, -compute, -tpu over REST): payload shapes from oslogin.v1.json, the
project's enable-oslogin, constraints/compute.requireOsLogin, and who the hosts let in."""

from __future__ import annotations

import time

import pytest

from tpujob.cloud.base import SliceRequest
from tpujob.cloud.oslogin import GcpOsLogin
from tpujob.cloud.tpu_api import GcpCloud
from tpujob.emulator.apis.oslogin import ACCOUNT, posix_username
from tpujob.emulator.server import EmulatorServer
from tpujob.errors import CloudRefused, NotFoundError

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx1b2tlbmtleWRhdGFmb3J0ZXN0aW5nMTIzNDU2Nzg5 tpujob"
KIND, B64 = KEY.split()[:2]
# Another key: profiles are the account's in every project, and the server is shared by the module.
KEY2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4/ tpujob"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with EmulatorServer(tmp_path_factory.mktemp("emu"), storage=False, provisioning_delay=0.01) as srv:
        yield srv


def test_import_answers_the_login_profile_with_the_posix_user_and_the_key(server):
    client = GcpOsLogin.for_emulator(server.url)
    profile = client.import_key(ACCOUNT, "p-import", KEY, 3600)
    assert profile.username == posix_username(ACCOUNT) and profile.username.startswith("sa_")
    assert profile.holds(KEY)
    again = client.login_profile(ACCOUNT, "p-import")
    assert again == profile


def test_a_user_accounts_posix_name_is_the_email_with_underscores():
    assert posix_username("cloudysanfrancisco@gmail.com") == "cloudysanfrancisco_gmail_com"


def test_project_metadata_carries_enable_oslogin_only_while_on(server):
    client = GcpOsLogin.for_emulator(server.url)
    assert client.project_enabled("p-meta") is None
    server.emulator.oslogin.set("p-meta", True)
    assert client.project_enabled("p-meta") is True
    assert client.project_enabled("p-other") is None  # a project's own setting
    server.emulator.oslogin.set("p-meta", False)
    assert client.project_enabled("p-meta") is None


def test_hosts_under_os_login_take_only_imported_unexpired_keys_for_the_profiles_user(server):
    oslogin = server.emulator.oslogin
    oslogin.set("p-hosts", True)
    user = posix_username(ACCOUNT)
    kind, b64 = KEY2.split()[:2]
    assert not oslogin.accepts("p-hosts", user, kind, b64)  # not imported yet
    GcpOsLogin.for_emulator(server.url).import_key(ACCOUNT, "p-hosts", KEY2, 3600)
    assert oslogin.accepts("p-hosts", user, kind, b64)
    assert not oslogin.accepts("p-hosts", "tpujob", kind, b64)  # only as the profile's user
    oslogin.set("p-hosts", True, role=False)  # no roles/compute.osLogin: refused all the same
    assert not oslogin.accepts("p-hosts", user, kind, b64)


def test_an_expired_key_is_refused(server):
    oslogin = server.emulator.oslogin
    oslogin.set("p-exp", True)
    past = int((time.time() - 60) * 1_000_000)
    oslogin.import_key("someone@example.com", {"key": KEY, "expirationTimeUsec": str(past)}, "p-exp")
    assert not oslogin.accepts("p-exp", "someone_example_com", KIND, B64)


def test_a_nodes_own_enable_oslogin_overrides_the_projects(server):
    oslogin = server.emulator.oslogin
    oslogin.set("p-node", True)
    assert oslogin.on_for("p-node", {}) is True
    assert oslogin.on_for("p-node", {"enable-oslogin": "FALSE"}) is False
    assert oslogin.on_for("p-off", {"enable-oslogin": "true"}) is True


def test_delete_key_then_404(server):
    from tpujob.emulator.apis.errors import ApiError
    from tpujob.emulator.apis.oslogin import fingerprint

    oslogin = server.emulator.oslogin
    oslogin.import_key("del@example.com", {"key": KEY}, "p")
    assert oslogin.delete_key("del@example.com", fingerprint(KEY)) == {}
    with pytest.raises(ApiError) as caught:
        oslogin.delete_key("del@example.com", fingerprint(KEY))
    assert caught.value.code == 404


def request(project, metadata):
    return SliceRequest(project=project, zone="us-central2-b", name="n-oslogin", accelerator_type="v4-8",
                        runtime_version="tpu-ubuntu2204-base", metadata=metadata)


def test_require_refuses_a_node_opting_out_with_the_org_policy_wording(server):
    server.emulator.oslogin.set("p-req", True, required=True)
    cloud = GcpCloud.for_emulator(server.url)
    with pytest.raises(CloudRefused) as caught:
        cloud.create_node(request("p-req", {"enable-oslogin": "FALSE"}))
    assert "Constraint constraints/compute.requireOsLogin violated for project projects/p-req" in str(caught.value)
    with pytest.raises(NotFoundError):
        cloud.get_node("p-req", "us-central2-b", "n-oslogin")  # nothing made
    server.emulator.oslogin.set("p-req", True, required=False)  # on, not required: the opt-out is taken
    assert cloud.create_node(request("p-req", {"enable-oslogin": "FALSE"})).node_state == "READY"
    cloud.delete_node("p-req", "us-central2-b", "n-oslogin")


def test_a_key_that_is_not_ssh_text_is_refused_with_googles_400(server):
    from tpujob.emulator.apis.errors import ApiError

    with pytest.raises(ApiError) as caught:
        server.emulator.oslogin.import_key(ACCOUNT, {"key": "ssh-ed25519 not-base64!"}, "p")
    assert caught.value.code == 400 and caught.value.message == "Request contains an invalid argument."


def test_require_refuses_a_queued_resource_whose_node_opts_out(server):
    from dataclasses import replace

    server.emulator.oslogin.set("p-req-qr", True, required=True)
    cloud = GcpCloud.for_emulator(server.url)
    queued = replace(request("p-req-qr", {"enable-oslogin": "false"}), queued=True)
    with pytest.raises(CloudRefused) as caught:
        cloud.create_queued_resource(queued)
    assert "constraints/compute.requireOsLogin" in str(caught.value)
    assert cloud.list_slices("p-req-qr", "us-central2-b") == {}  # nothing queued


def test_a_full_login_profile_refuses_another_key_with_googles_words_and_logins_say_remove_old_keys(server):
    # "Login profile size exceeds 32 KiB. Delete profile values to make additional space." (400
    # INVALID_ARGUMENT: kyma-project/test-infra#93, terratest#536); the fix that worked: remove keys.
    import base64

    from tpujob.attempt.logins import Logins
    from tpujob.errors import LoginProfileFull, SshAuthRefused
    from tpujob.settings import Settings

    client = GcpOsLogin.for_emulator(server.url)
    account = "full@p.iam.gserviceaccount.com"
    for size in (400, 20):  # old keys, big then small: the profile fills to its last bytes
        for i in range(2000):
            try:
                blob = base64.b64encode(f"{size}-{i}".encode().ljust(size, b"x")).decode()
                client.import_key(account, "p-full", f"ssh-rsa {blob} old", 3600)
            except LoginProfileFull as exc:
                assert "Login profile size exceeds 32 KiB. Delete profile values to make additional space." \
                    in str(exc)
                break
        else:
            raise AssertionError("the profile never filled")
    logins = Logins(Settings(ssh_os_login="true"), lambda: KEY, client=client, account=account)
    with pytest.raises(SshAuthRefused) as refused:
        logins.for_slice("p-full", {"enable-oslogin": "TRUE"})  # the node's metadata: OS Login on
    said = str(refused.value)
    assert "gcloud compute os-login ssh-keys remove" in said and "grant" not in said
