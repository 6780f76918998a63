"""Typed errors. Library code raises these; only the CLI prints them and exits.

Exit codes (documented in README.md, "Exit codes"):
  0 ok, 1 unexpected, 2 usage or invalid spec, 3 not found,
  4 conflict (illegal transition, job locked, a file `init` will not overwrite, another user's
    job cancelled or deleted without --force), 5 cloud error,
  6 auth/config,
  7 a job followed to its end (`create --wait`) did not succeed.
"""

from __future__ import annotations

EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_CLOUD = 5
EXIT_CONFIG = 6
EXIT_JOB_FAILED = 7


class TpujobError(Exception):
    """Base of every error the CLI turns into `error: <message>` and an exit code."""

    exit_code = EXIT_UNEXPECTED

    def __init__(self, message: str):
        # One line: the CLI prints it as is, so newlines would break the contract.
        super().__init__(" ".join(str(message).split()))

    @property
    def message(self) -> str:
        return str(self)


class UsageError(TpujobError):
    exit_code = EXIT_USAGE


class SpecError(UsageError):
    """The job spec is invalid. `field` names the offending key path, `line` the YAML line."""

    def __init__(self, message: str, field: str | None = None, line: int | None = None):
        where = ""
        if field:
            where = f"{field}"
            if line is not None:
                where += f" (line {line})"
            where += ": "
        super().__init__(where + message)
        self.field = field
        self.line = line


class MissingBucket(UsageError):
    """A bucket the job names does not exist; `fix` is the command that creates it."""

    def __init__(self, bucket: str, fix: str):
        super().__init__(f"bucket {bucket} does not exist: create it with `{fix}`")
        self.bucket, self.fix = bucket, fix


class NotFoundError(TpujobError):
    exit_code = EXIT_NOT_FOUND


class ConflictError(TpujobError):
    exit_code = EXIT_CONFLICT


class IllegalTransition(ConflictError):
    pass


class JobLocked(ConflictError):
    pass


class OthersJob(ConflictError):
    """`cancel`/`delete`/`clean` of a job another user submitted, without --force: a lab's
    convention (tpujob/owners.py), not a security boundary."""


class CloudError(TpujobError):
    exit_code = EXIT_CLOUD


class StockoutError(CloudError):
    """The zone has no capacity for the accelerator; reconcile falls back to the next entry."""


class InternalCreateError(StockoutError):
    """A create operation ended INTERNAL (code 13), as Google reports some spot stockouts: the
    same remedy as a capacity miss (backoff, then the next placement), never a refusal."""


class CloudRefused(CloudError):
    """The cloud refused a request for good (invalid argument, unknown project or zone, missing
    snapshot): sending the same request again cannot succeed, so a sweep ends the job instead
    of retrying it every sweep."""


class LoginProfileFull(CloudRefused):
    """OS Login refused to import a key because the account's login profile is full (32 KiB):
    removing old keys helps, no role does (cloud/error_rules.py has its source)."""


class QuotaExceeded(CloudRefused):
    """A resource quota (not a request rate, not a stockout) is spent: it takes a quota
    increase or a deleted slice, not a retry. `region`/`zone`: where Google says the limit
    applies (None when it does not say), so a fallback elsewhere can be preferred; `scope`:
    "zone" or "region" (from the place, or the quota's PerProjectPer{Zone,Region} name), None
    when Google says neither."""

    def __init__(self, message: str, *, region: str | None = None, zone: str | None = None,
                 scope: str | None = None):
        super().__init__(message)
        self.region = region
        self.zone = zone
        self.scope = scope or ("zone" if zone else "region" if region else None)


class PlacementUnavailable(CloudRefused):
    """The zone does not offer the accelerator (or offers no TPUs at all): this placement can
    never succeed, but another zone or accelerator from the spec's fallbacks may."""


class LocationDenied(PlacementUnavailable):
    """403 LOCATION_POLICY_VIOLATED: this project may not use the zone (an organisation's
    resource-location policy, or a zone that needs allowlisting such as us-central2-b). Not a
    role or login problem: another placement may work, and with none left the spec's zone is a
    configuration error (exit 6) naming the zone."""

    exit_code = EXIT_CONFIG

    def __init__(self, message: str, *, zone: str | None = None):
        super().__init__(message)
        self.zone = zone


class ReservationUnavailable(PlacementUnavailable):
    """The create names (or the project requires) a reservation the zone does not have: this
    placement cannot succeed as asked, another zone may."""


class SlicePreempted(CloudError):
    """The slice was preempted while the call was in flight (operation code 3 "update is not
    supported while in state PREEMPTED"): a preemption, not a refusal."""


class HostsUnreachable(CloudError):
    """A host step could not reach a host (no SSH connection, or one lost mid-step): not a
    setup failure. The sweep retries, and replaces the slice if its hosts stay unreachable past
    the job's unhealthy grace."""


class SshAuthRefused(CloudError):
    """A host answered SSH but refused this node's login (paramiko's AuthenticationException):
    not a host that cannot be reached. A fact about the node (OS Login, a missing role, its key
    not in `ssh-keys` yet), never about the job: the sweep leaves the job as it is and reports
    the node's problem (decide's NodeRefused); a new slice would not let this node in either."""


class LocalIOError(TpujobError):
    """A file on this machine could not be written or read (a full disk, a directory tpujob may
    not write): the machine's fault, never a host's. A host step that meets one stops with it,
    and the sweep retries it; it never reads as a connection lost, so no slice is replaced
    for it. `LocalIOError.of` words it from the OSError."""

    exit_code = EXIT_CONFIG

    @classmethod
    def of(cls, what: str, path: object, exc: OSError) -> LocalIOError:
        import errno

        why = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded",
               errno.EROFS: "read-only file system"}.get(exc.errno or 0) or exc.strerror or type(exc).__name__
        if why == "disk full":
            return cls(f"disk full: cannot {what} {path} (free space on this machine)")
        return cls(f"cannot {what} {path}: {why} (a problem on this machine, not on the hosts)")


class SetupFailed(TpujobError):
    """The setup script exited non-zero on a host (a connection error is not this)."""


class ConfigError(TpujobError):
    exit_code = EXIT_CONFIG


class StoreError(ConfigError):
    """The store cannot be used as it is (a damaged or read-only file, a migration that failed):
    the message names it and says how to recover."""


AUTH_HINT = "run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"


class AuthError(ConfigError):
    """Credentials missing, expired or refused (exit 6, with a hint on fixing them)."""


class PermissionDenied(AuthError):
    """The credentials work but lack a permission for this request (403)."""


class ServiceDisabled(PermissionDenied):
    """The project has not enabled the API the request needs (403 SERVICE_DISABLED)."""


class BillingDisabled(PermissionDenied):
    """403: the project's billing is disabled, or is a free-trial account Cloud TPU refuses; the
    fix is in Cloud Billing, not in IAM."""


class JobDidNotSucceed(TpujobError):
    exit_code = EXIT_JOB_FAILED


def expired_credentials(exc: BaseException) -> AuthError | None:
    """google-auth's RefreshError (Application Default Credentials whose token expired or was
    revoked), wherever it escaped a typed error, as one line with the fix; None for any other
    error. Told by its class's name: this module imports no Google library (`list` needs none)."""
    if not any(kind.__name__ == "RefreshError" and kind.__module__ == "google.auth.exceptions"
               for kind in type(exc).__mro__):
        return None
    reason = exc.args[0] if exc.args and isinstance(exc.args[0], str) else type(exc).__name__
    return AuthError(f"Google credentials expired or revoked ({reason}); {AUTH_HINT}")
