"""OS Login: whether a project turns it on, and logging in under it (google-cloud-os-login).

With OS Login on, a host ignores the `ssh-keys` metadata: it asks OS Login for the keys of the
user who logs in [cloud.google.com/compute/docs/instances/ssh]. So tpujob's public key is
imported into the account's login profile (`users.importSshPublicKey`, with an expiry), and
tpujob logs in as that profile's POSIX username: never one built by hand from the email
(a service account's is `sa_<numeric id>`).

Whether it is on: the node's own `enable-oslogin` metadata, else the project's
(commonInstanceMetadata, compute.projects.get); "true" in any case means on, any other value
off, absent means not set (google-cloud-sdk command_lib/util/ssh/ssh.py, MetadataHasEnable and
FeatureEnabledInMetadata). The clients (compute_v1 alone is about two CPU-seconds of import)
are imported by GcpOsLogin, not by this module: the rule above is read on every login.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from tpujob.cloud.api_calls import emulator_settings, invoke, new_retry

OSLOGIN = "oslogin.googleapis.com"
COMPUTE = "compute.googleapis.com"
ENABLE_KEY = "enable-oslogin"  # the metadata key, on a node or in the project's common metadata


def metadata_flag(value: str | None) -> bool | None:
    """An `enable-oslogin` value as gcloud reads it: None when absent, else value == "true"."""
    return None if value is None else value.strip().lower() == "true"


def effective(node_value: str | None, project_enabled: bool | None) -> bool:
    """On for a node: its own `enable-oslogin` when set, else the project's (off when unset)."""
    node = metadata_flag(node_value)
    return node if node is not None else bool(project_enabled)


@dataclass(frozen=True)
class Profile:
    """What a login profile says: the POSIX username to log in as, and the keys it holds."""
    username: str
    keys: tuple[str, ...] = ()  # "TYPE BASE64" of each key registered (comments dropped)

    def holds(self, public_line: str) -> bool:
        return _key_id(public_line) in self.keys


def posix_username(profile: Any) -> str:
    """The profile's username: the primary POSIX account's, else the first's (as gcloud picks
    when no user is asked for); "" when
    the profile has none (OS Login makes one on the first import). OS Login v1 discovery
    document, LoginProfile.posixAccounts; google-cloud-sdk command_lib/util/ssh/ssh.py."""
    accounts = list(profile.posix_accounts)
    chosen = next((a for a in accounts if a.primary), accounts[0] if accounts else None)
    return chosen.username if chosen is not None else ""


class GcpOsLogin:
    """OS Login and the project's metadata through Google's clients (REST, like every client)."""

    def __init__(self, endpoint: str | None = None, compute_endpoint: str | None = None,
                 credentials: Any = None, retry_initial: float = 1.0, retry_maximum: float = 30.0,
                 retry_deadline: float = 120.0):
        from google.cloud import oslogin_v1

        self._oslogin = oslogin_v1.OsLoginServiceClient(
            transport="rest", credentials=credentials, client_options=_options(endpoint))
        # compute_v1 on the first project read only: a process that took another's read of the
        # project (attempt/logins.py) and only imports its key never pays for its import.
        self._compute = (credentials, compute_endpoint)
        self._projects_client: Any = None
        self._retry = new_retry(retry_initial, retry_maximum, retry_deadline)
        self.api_calls = 0

    @property
    def _projects(self) -> Any:
        if self._projects_client is None:
            from google.cloud import compute_v1

            credentials, endpoint = self._compute
            self._projects_client = compute_v1.ProjectsClient(
                transport="rest", credentials=credentials, client_options=_options(endpoint))
        return self._projects_client

    @classmethod
    def for_emulator(cls, endpoint: str, **kwargs: Any) -> GcpOsLogin:
        return cls(endpoint=endpoint, compute_endpoint=endpoint,
                   **emulator_settings(polls=False, **kwargs))

    def project_enabled(self, project: str) -> bool | None:
        """The project's `enable-oslogin` (commonInstanceMetadata): None when it is not set."""
        found = self._call(f"reading the metadata of project {project}", COMPUTE,
                           self._projects.get, project=project)
        values = [i.value for i in found.common_instance_metadata.items if i.key == ENABLE_KEY]
        return metadata_flag(values[0]) if values else None

    def import_key(self, account: str, project: str, public_line: str, ttl_seconds: float) -> Profile:
        """Register `public_line` in the account's login profile, expiring after `ttl_seconds`
        (importing a key already there renews it); the profile as OS Login answers."""
        from google.cloud.oslogin_v1 import common

        expires = int((time.time() + ttl_seconds) * 1_000_000)
        answer = self._call(f"importing tpujob's SSH key into the OS Login profile of {account}", OSLOGIN,
                            self._oslogin.import_ssh_public_key, parent=f"users/{account}",
                            ssh_public_key=common.SshPublicKey(key=public_line,
                                                               expiration_time_usec=expires),
                            project_id=project)
        return _profile(answer.login_profile)

    def login_profile(self, account: str, project: str) -> Profile:
        from google.cloud import oslogin_v1

        answer = self._call(f"reading the OS Login profile of {account}", OSLOGIN,
                            self._oslogin.get_login_profile,
                            request=oslogin_v1.GetLoginProfileRequest(name=f"users/{account}", project_id=project))
        return _profile(answer)

    def _call(self, what: str, service: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        def attempt() -> Any:
            self.api_calls += 1
            return fn(**kwargs)

        return invoke(self._retry, what, attempt, service)


def _options(url: str | None) -> dict[str, str] | None:
    return {"api_endpoint": url} if url else None


def _key_id(line: str) -> str:
    return " ".join(line.split()[:2])


def _profile(profile: Any) -> Profile:
    return Profile(posix_username(profile), tuple(sorted(_key_id(k.key) for k in profile.ssh_public_keys.values())))
