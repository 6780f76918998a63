"""The emulated OS Login v1 subset, and OS Login as the emulated hosts and the TPU API apply it.

Served (paths and payloads from Google's OS Login v1 discovery document, oslogin.v1.json
revision 20260610 in google-api-python-client 2.202.0; the client's own paths in
google/cloud/oslogin_v1/services/os_login_service/transports/rest_base.py):
- `POST /v1/users/{user}:importSshPublicKey?projectId=P`, body SshPublicKey `{key,
  expirationTimeUsec}`, answers ImportSshPublicKeyResponse `{loginProfile}`;
- `GET /v1/users/{user}/loginProfile?projectId=P`, answers LoginProfile `{name, posixAccounts[],
  sshPublicKeys{fingerprint: SshPublicKey}}`;
- `DELETE /v1/users/{user}/sshPublicKeys/{fingerprint}`, answers Empty `{}`.

PosixAccount.username is never the email: a user's is the email with `@` and `.` as `_`, a
service account's `sa_<numeric id>` (Google's cloud.google.com/compute/docs/connect/add-ssh-keys
page; HashiCorp Packer's googlecompute docs). The emulator's own account is a
service account, so a client that built the username from the email would be refused.

`tpujob emulator oslogin on` turns OS Login on for every project: the project's metadata reads
`enable-oslogin: TRUE` (compute.projects.get), and a host whose node does not opt out accepts
only keys imported here, for the profile's POSIX username only, unexpired (metadata SSH keys are
disabled with OS Login on: cloud.google.com/compute/docs/instances/ssh). A node's own
`enable-oslogin` overrides the project's (google-cloud-sdk command_lib/util/ssh/ssh.py).
`--require` is the organisation policy constraints/compute.requireOsLogin: a node asking for
`enable-oslogin: FALSE` is refused at create (cloud.google.com/compute/docs/oslogin/
manage-oslogin-in-an-org: "setting it false in VM or project metadata is rejected").
`--no-role` is an account without roles/compute.osLogin: keys import, hosts refuse the login.
`--admin EMAIL` (repeatable) gives that account roles/compute.osAdminLogin: on the hosts, its
user may `sudo` (the role's description in Google's IAM roles list, cloud.google.com/iam/docs/
roles-permissions/compute: "Log in to a Compute Engine instance as an administrator via OS Login
with sudo"; roles/compute.osLogin's: "as a non-administrator user"); any other OS Login user's
`sudo -n` says "sudo: a password is required", as sudo does for a user outside the sudoers.
A user of metadata keys (OS Login off for the node) may sudo: Google's guest agent adds the
users it makes to the google-sudoers group (GoogleCloudPlatform/guest-agent, README).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
import time
import urllib.parse
from typing import Any, Mapping

from werkzeug.routing import Map, Rule

from tpujob.emulator.apis.bodies import read_json
from tpujob.emulator.apis.errors import ApiError

# A login profile holds at most 32 KiB (cloud.google.com/compute/docs/troubleshooting/
# troubleshoot-os-login); here the keys' text is what counts (what else Google counts is unknown).
PROFILE_LIMIT = 32 * 1024
PROFILE_FULL = "Login profile size exceeds 32 KiB. Delete profile values to make additional space."

# The account every emulated API call acts as (anonymous credentials carry no email).
ACCOUNT = "tpujob-emulator@tpujob-local.iam.gserviceaccount.com"

ROUTES = Map([
    Rule("/v1/users/<user>:importSshPublicKey", methods=["POST"], endpoint="import_key"),
    Rule("/v1/users/<user>/loginProfile", methods=["GET"], endpoint="login_profile"),
    Rule("/v1/users/<user>/sshPublicKeys/<fingerprint>", methods=["DELETE"], endpoint="delete_key"),
], strict_slashes=False)

# No real answer of Google's to a create under constraints/compute.requireOsLogin was found (not
# in any repository, issue or page searched). The wording follows Google's answers for other
# boolean constraints, e.g. "Constraint constraints/compute.requireShieldedVm violated for project
# projects/P. Secure Boot is not enabled in the 'shielded_instance_config' field." (quoted in
# tests/fixtures/gcp_errors/org_policy_violated.json), and the status the TPU API gives a request
# refused by a precondition (400 FAILED_PRECONDITION). This is the one place it is kept.
REQUIRE_CONSTRAINT = "constraints/compute.requireOsLogin"


def require_refusal(project: str) -> ApiError:
    return ApiError(400, f"Constraint {REQUIRE_CONSTRAINT} violated for project projects/{project}. "
                         "Metadata 'enable-oslogin' cannot be set to FALSE: OS Login is required "
                         "for all VM instances.", status="FAILED_PRECONDITION")


def fingerprint(key_line: str) -> str:
    """SshPublicKey.fingerprint: "the SHA-256 fingerprint" (discovery); its exact form is not
    documented: here the hex SHA-256 of the key's blob."""
    parts = key_line.split()
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (IndexError, binascii.Error):
        # SshPublicKey.key: "Public key text in SSH format" (discovery); Google's answer to one
        # that is not (gcloud quoted in GoogleCloudPlatform/compute-image-tools#487).
        raise ApiError(400, "Request contains an invalid argument.") from None
    return hashlib.sha256(blob).hexdigest()


def posix_username(email: str) -> str:
    """A service account's `sa_` + a stable 21-digit id; a user's email with @ and . as _."""
    if email.endswith(".gserviceaccount.com"):
        digits = str(int(hashlib.sha256(email.encode()).hexdigest(), 16))[:21]
        return f"sa_{digits}"
    return email.replace("@", "_").replace(".", "_").lower()


def _flag(value) -> bool | None:
    return None if value is None else str(value).strip().lower() == "true"


_OFF = {"enabled": False, "required": False, "role": True, "admins": []}


class OsLogin:
    """Each project's switches (OS Login is a project's setting; tests each use their own
    project on one emulator) and every profile's keys (a profile is the account's, in every
    project). Thread-safe; methods raise ApiError."""

    def __init__(self):
        self._policy: dict[str, dict] = {}  # project -> {enabled, required, role}
        self._keys: dict[str, dict[str, dict]] = {}  # email -> fingerprint -> SshPublicKey
        self._lock = threading.Lock()

    # ---- switches ---------------------------------------------------------------------------
    def set(self, project: str, enabled: bool, required: bool = False, role: bool = True,
            admins: list[str] | None = None) -> dict:
        """`role`: the account holds roles/compute.osLogin on the project (hosts let it in);
        `admins`: the accounts that also hold roles/compute.osAdminLogin (sudo on the hosts)."""
        with self._lock:
            self._policy[project] = {"enabled": enabled, "required": enabled and required, "role": role,
                                     "admins": sorted(set(admins or ()))}
        return self.state(project)

    def state(self, project: str) -> dict:
        with self._lock:
            return {"project": project, **self._policy.get(project, _OFF)}

    # ---- what the rest of the emulator asks ---------------------------------------------------
    def project_metadata(self, project: str) -> list[dict]:
        """commonInstanceMetadata.items: `enable-oslogin` as `gcloud compute project-info
        add-metadata --metadata enable-oslogin=TRUE` sets it, while OS Login is on."""
        return [{"key": "enable-oslogin", "value": "TRUE"}] if self.state(project)["enabled"] else []

    def check_node(self, project: str, node_body: dict) -> None:
        """A node's create under --require: `enable-oslogin` other than true is refused."""
        value = (node_body.get("metadata") or {}).get("enable-oslogin")
        if self.state(project)["required"] and value is not None and not _flag(value):
            raise require_refusal(project)

    def on_for(self, project: str, node_metadata: dict) -> bool:
        """OS Login on a node: its own `enable-oslogin`, else the project's."""
        node = _flag((node_metadata or {}).get("enable-oslogin"))
        return node if node is not None else self.state(project)["enabled"]

    def accepts(self, project: str, username: str, key_type: str, key_b64: str) -> bool:
        """A login under OS Login: a key imported into a profile whose POSIX username is
        `username`, not expired, by an account allowed to log in."""
        now_usec = int(time.time() * 1_000_000)
        if not self.state(project)["role"]:
            return False
        with self._lock:
            for email, keys in self._keys.items():
                if posix_username(email) != username:
                    continue
                for key in keys.values():
                    parts = key["key"].split()
                    expires = int(key.get("expirationTimeUsec") or 0)
                    if parts[:2] == [key_type, key_b64] and (not expires or expires > now_usec):
                        return True
        return False

    # ---- the API ----------------------------------------------------------------------------
    def import_key(self, email: str, body: dict, project: str) -> dict:
        key = (body.get("key") or "").strip()
        if len(key.split()) < 2:
            # SshPublicKey.key is "Required. Public key text in SSH format" (discovery).
            raise ApiError(400, "Request contains an invalid argument.")
        expires = body.get("expirationTimeUsec")
        if expires is not None and not str(expires).isdigit():
            raise ApiError(400, "Invalid value at 'ssh_public_key.expiration_time_usec'")
        print_ = fingerprint(key)
        with self._lock:
            held = self._keys.get(email, {})
            if print_ not in held and sum(len(k["key"]) for k in held.values()) + len(key) > PROFILE_LIMIT:
                # Google's words and status (INVALID_ARGUMENT, 400): kyma-project/test-infra#93,
                # terratest#536 and skypilot#2475 quote them; the limit: troubleshoot-os-login.
                raise ApiError(400, PROFILE_FULL, status="INVALID_ARGUMENT")
            self._keys.setdefault(email, {})[print_] = {
                "key": key, "fingerprint": print_, "name": f"users/{email}/sshPublicKeys/{print_}",
                **({"expirationTimeUsec": str(expires)} if expires is not None else {})}
        return {"loginProfile": self.login_profile(email, project)}

    def login_profile(self, email: str, project: str) -> dict:
        with self._lock:
            keys = {k: dict(v) for k, v in self._keys.get(email, {}).items()}
        name = posix_username(email)
        uid = str(1000 + int(hashlib.sha256(email.encode()).hexdigest(), 16) % 1_000_000)
        return {"name": email, "sshPublicKeys": keys, "posixAccounts": [{
            "primary": True, "username": name, "uid": uid, "gid": uid,
            "homeDirectory": f"/home/{name}", "operatingSystemType": "LINUX",
            "accountId": project, "name": f"users/{email}/projects/{project}"}]}

    def delete_key(self, email: str, print_: str) -> dict:
        with self._lock:
            if self._keys.get(email, {}).pop(print_, None) is None:
                raise ApiError(404, "Requested entity was not found.")
        return {}


class HostLogin:
    """A node's hosts' login check (called): None lets the `ssh-keys` metadata decide (OS Login
    off for the node); and whether a logged-in user may sudo (`may_sudo`). Read at each login,
    so `tpujob emulator oslogin` applies to running nodes too."""

    def __init__(self, oslogin: OsLogin, project: str, node_metadata):
        self.oslogin, self.project, self.node_metadata = oslogin, project, node_metadata

    def __call__(self, username: str, key_type: str, key_b64: str) -> bool | None:
        if not self.oslogin.on_for(self.project, self.node_metadata()):
            return None
        return self.oslogin.accepts(self.project, username, key_type, key_b64)

    def may_sudo(self, username: str) -> bool:
        if not self.oslogin.on_for(self.project, self.node_metadata()):
            return True  # a metadata-keys user: in google-sudoers
        return any(posix_username(email) == username for email in self.oslogin.state(self.project)["admins"])


def host_login(oslogin: OsLogin, project: str, node_metadata) -> HostLogin:
    return HostLogin(oslogin, project, node_metadata)


def handle(oslogin: OsLogin, request, endpoint: str, args: Mapping[str, Any], project: str) -> dict:
    """One matched /v1/users/ request. `user` is users/{email}'s last part, URL-decoded."""
    email = urllib.parse.unquote(args["user"])
    project = request.args.get("projectId") or project
    if endpoint == "import_key":
        return oslogin.import_key(email, read_json(request), project)
    if endpoint == "login_profile":
        return oslogin.login_profile(email, project)
    return oslogin.delete_key(email, args["fingerprint"])
