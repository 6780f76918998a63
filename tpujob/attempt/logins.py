"""Who tpujob logs in as on a slice's hosts: OS Login's POSIX user, or `ssh_user` with the key
in the node's `ssh-keys` metadata. And, when the hosts refuse the key, why and what fixes it.

OS Login is on for a node when its own `enable-oslogin` metadata says so, else when its
project's does (cloud/oslogin.py; google-cloud-sdk command_lib/util/ssh/ssh.py). With it on,
metadata keys are ignored (cloud.google.com/compute/docs/instances/ssh): tpujob's key is
imported into the OS Login profile of the account tpujob acts as, with an expiry (renewed by any
process that logs in once half of it has passed), and the login is the profile's POSIX username.
`ssh_os_login: false` creates nodes with `enable-oslogin: FALSE` instead (node metadata
overrides the project's), which an organisation policy (constraints/compute.requireOsLogin) may
refuse.

The project's setting is shared between processes for PROJECT_TTL_SECONDS (a file a project
under $TPUJOB_HOME/cache/oslogin/): reading it takes google-cloud-compute, whose import alone
is about two CPU-seconds, and a cron sweep is a new process every minute. A login built on a
read this process did not make is not confirmed: before the hosts' refusal of it ends a job,
the project is read again (`confirm`), and a refusal the fresh read explains is the next
sweep's retry, never a failure.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from tpujob.errors import CloudError, CloudRefused, LoginProfileFull, PermissionDenied, SshAuthRefused
from tpujob.settings import private_dir

if TYPE_CHECKING:
    from tpujob.cloud.oslogin import Profile
    from tpujob.settings import Settings

KEY_TTL_SECONDS = 7 * 24 * 3600.0  # the imported key's expiry: a week, renewed at half of it
PROJECT_TTL_SECONDS = 600.0  # a watch reads a project's enable-oslogin again after this
OPT_OUT = {"enable-oslogin": "FALSE"}  # node metadata under `ssh_os_login: false`
POLICY_NOTE = ("an organisation policy (constraints/compute.requireOsLogin) may refuse "
               "`enable-oslogin: FALSE`, and the create then fails with its message")
ROLE_FIX = "roles/compute.osLogin (roles/compute.osAdminLogin for sudo)"


def opt_out_warnings(settings: Settings) -> list[str]:
    """What `validate` and `create` say under `ssh_os_login: false`."""
    if not settings.os_login_opt_out:
        return []
    return [f"ssh_os_login false: the job's nodes are created with enable-oslogin FALSE; {POLICY_NOTE}"]


@dataclass(frozen=True)
class Login:
    user: str
    os_login: bool
    project: str
    account: str = ""  # OS Login only: whose profile holds the key
    node_says: str | None = None  # the node's own enable-oslogin, when it has one
    # False when the project's setting came from another process's read (Logins.confirm).
    confirmed: bool = field(default=True, compare=False)
    # OS Login, on an attempt another account set up: the user its program runs as, acted as
    # through sudo (roles/compute.osAdminLogin); "" for the login's own user.
    run_as: str = field(default="", compare=False)

    @property
    def host_user(self) -> str:
        """Whose program, and whose home on the hosts, the commands work on."""
        return self.run_as or self.user

    def refusal(self, cause: str) -> str:
        """The event when the hosts refuse tpujob's key: the cause, why, and the fix."""
        if self.os_login:
            where = (f"the node's metadata sets enable-oslogin={self.node_says}" if self.node_says is not None
                     else f"OS Login is enabled on project {self.project}")
            return (f"hosts refused tpujob's SSH key for user {self.user}: {where}, so hosts take only keys "
                    f"registered through OS Login; tpujob's key is registered in the OS Login profile of "
                    f"{self.account} (user {self.user}) and still refused ({cause}); fix: grant {self.account} "
                    f"{ROLE_FIX} on project {self.project}, or `tpujob config set ssh_os_login false` "
                    f"(nodes get enable-oslogin: FALSE; {POLICY_NOTE}); then `tpujob resume`")
        why = ("the node's metadata sets enable-oslogin=FALSE" if self.node_says is not None
               else f"OS Login is off on project {self.project}")
        return (f"hosts refused tpujob's SSH key for user {self.user}: {why}, so the key in the node's ssh-keys "
                f"metadata should let it in, and did not ({cause}); fix: check whether OS Login is enforced "
                f"on the project (gcloud compute project-info describe --project {self.project}) or the "
                f"node's metadata was changed, then `tpujob resume`")


class OsLoginClient(Protocol):
    """What Logins asks of OS Login (cloud/oslogin.py's GcpOsLogin, or a test's stand-in)."""

    def project_enabled(self, project: str) -> bool | None: ...
    def import_key(self, account: str, project: str, public_line: str, ttl_seconds: float) -> Profile: ...
    def login_profile(self, account: str, project: str) -> Profile: ...


class Logins:
    """One per sweep (or command): the project's setting and the key's import, asked of the
    cloud once per project and reused, so a sweep over many jobs costs one of each."""

    def __init__(self, settings: Settings, public_key: Callable[[], str], *, client: OsLoginClient | None = None,
                 account: str | None = None, clock: Callable[[], float] = time.time, register: bool = True,
                 shared: Path | None = None):
        """`register=False` only looks (gc, doctor): the profile is read, and a key not in it
        yet is a refusal instead of an import. `shared`: the directory where processes share
        their reads of a project's setting, None for none."""
        self.settings = settings
        self.register = register
        self._public_key = public_key
        self._client = client
        self._account = account
        self.clock = clock
        self._lock = threading.Lock()
        self._shared = shared
        self._project: dict[str, tuple[float, bool | None, bool]] = {}  # project -> (when read, value, by us)
        self._imported: dict[str, tuple[float, str]] = {}  # project -> (when, POSIX user)
        self._reading: dict[str, threading.Lock] = {}  # project -> held while its setting is read

    @property
    def client(self) -> OsLoginClient:
        if self._client is None:
            from tpujob.clients import make_oslogin

            self._client = make_oslogin(self.settings)
        return self._client

    @property
    def account(self) -> str:
        if self._account is None:
            from tpujob.clients import login_account

            self._account = login_account(self.settings)
        return self._account

    def node_metadata(self) -> dict[str, str]:
        """What a new node's metadata carries for OS Login: the opt-out, or nothing."""
        return dict(OPT_OUT) if self.settings.os_login_opt_out else {}

    def project_enabled(self, project: str) -> bool | None:
        return self._project_setting(project)[0]

    def _project_setting(self, project: str, fresh: bool = False) -> tuple[bool | None, bool]:
        """The project's enable-oslogin, and whether this process read it from the cloud
        (`fresh`: read it now, whatever this process or another read before)."""
        with self._lock:
            reading = self._reading.setdefault(project, threading.Lock())
        with reading:  # one read at a time per project: a sweep's workers wait for its answer
            with self._lock:
                seen = None if fresh else self._project.get(project)
            if seen is None and self._shared is not None and not fresh:
                seen = _read_shared(self._shared, project)
            if seen is not None and 0 <= self.clock() - seen[0] < PROJECT_TTL_SECONDS:
                with self._lock:
                    self._project[project] = seen
                return seen[1], seen[2]
            found = self.client.project_enabled(project)
            read = (self.clock(), found, True)
            with self._lock:
                self._project[project] = read
            if self._shared is not None:
                _write_shared(self._shared, project, read)
            return found, True

    def for_slice(self, project: str, node_metadata: dict[str, str], fresh: bool = False) -> Login:
        """The login for a slice whose node carries `node_metadata` (`fresh`: on the project's
        setting as read now)."""
        from tpujob.cloud.oslogin import ENABLE_KEY, effective

        node_says = (node_metadata or {}).get(ENABLE_KEY)
        # A node that says nothing follows the project; one that does needs no project read.
        project_says, confirmed = ((None, True) if node_says is not None
                                   else self._project_setting(project, fresh))
        if not effective(node_says, project_says):
            return Login(self.settings.ssh_user, False, project, node_says=node_says, confirmed=confirmed)
        return Login(self._import(project), True, project, self.account, node_says, confirmed)

    def confirm(self, login: Login, node_metadata: dict[str, str]) -> Login | None:
        """`login` as the project says now, for the words of a refusal of it: read again when it
        rested on another process's read; None when the fresh read logs in otherwise (the
        refusal was the old read's, and the next try logs in as the fresh one says)."""
        if login.confirmed:
            return login
        fresh = self.for_slice(login.project, node_metadata, fresh=True)  # and shared from now on
        return fresh if fresh == login else None

    def refusal(self, project: str, node_metadata: dict[str, str], cause: str) -> str | None:
        """Why the hosts of a node with `node_metadata` refused the key, with the fix; None when
        the login rested on another process's read and a fresh one logs in otherwise (confirm)."""
        login = self.confirm(self.for_slice(project, node_metadata), node_metadata)
        return None if login is None else login.refusal(cause)

    def refused(self, project: str, node_metadata: dict[str, str], cause: str) -> CloudError:
        """The error a host step raises when the hosts refused the key: SshAuthRefused, or a
        retry where the refusal was a stale read's (refusal)."""
        why = self.refusal(project, node_metadata, cause)
        if why is not None:
            return SshAuthRefused(why)
        return CloudError(f"hosts refused tpujob's SSH key ({cause}): the login followed another process's "
                          f"read of project {project}'s OS Login setting, and a fresh read says otherwise; "
                          "the next try logs in as it says")

    def _import(self, project: str) -> str:
        with self._lock:
            seen = self._imported.get(project)
        if seen is not None and self.clock() - seen[0] < KEY_TTL_SECONDS / 2:
            return seen[1]
        if not self.register:
            profile = self.client.login_profile(self.account, project)
            if not profile.holds(self._public_key()):
                raise SshAuthRefused(f"tpujob's SSH key is not in the OS Login profile of {self.account}")
            return profile.username
        try:
            profile = self.client.import_key(self.account, project, self._public_key(), KEY_TTL_SECONDS)
        except LoginProfileFull as exc:  # its fix is in its words (cloud/error_rules.py): no role helps
            raise SshAuthRefused(f"OS Login is enabled on project {project} and refused to register tpujob's "
                                 f"SSH key for {self.account}: {exc}") from exc
        except (CloudRefused, PermissionDenied) as exc:  # for good (a role, the API): no login
            # (a 401, the sweep's own credentials, is retried by the next sweep instead)
            raise SshAuthRefused(
                f"OS Login is enabled on project {project} and refused to register tpujob's SSH key for "
                f"{self.account}: {exc}; fix: grant {self.account} {ROLE_FIX} on project {project} and "
                f"enable oslogin.googleapis.com, or `tpujob config set ssh_os_login false` ({POLICY_NOTE})"
            ) from exc
        if not profile.username:
            raise SshAuthRefused(f"the OS Login profile of {self.account} has no POSIX account after "
                                 "tpujob's key was imported: OS Login gives no user to log in as")
        with self._lock:
            self._imported[project] = (self.clock(), profile.username)
        return profile.username


def _shared_name(project: str) -> str:
    return f"{project.replace(os.sep, '_')}.json"


def _read_shared(directory: Path, project: str) -> tuple[float, bool | None, bool] | None:
    """Another process's read of the project's setting: (when, value, False), or None."""
    try:
        data = json.loads((directory / _shared_name(project)).read_text())
        when, value = float(data["read_at"]), data["enable_oslogin"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (when, value, False) if value in (True, False, None) else None


def _write_shared(directory: Path, project: str, read: tuple[float, bool | None, bool]) -> None:
    """Best effort, atomic (write, then rename): a reader sees a whole file or none."""
    try:
        private_dir(directory)
        tmp = directory / f".{_shared_name(project)}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(json.dumps({"read_at": read[0], "enable_oslogin": read[1]}))
        os.replace(tmp, directory / _shared_name(project))
    except OSError:
        pass  # the next process reads the project itself
