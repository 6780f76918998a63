"""Google's error answers, one row each: the table `tpujob.cloud.api_calls.classify` reads.

The first row of RULES that matches an answer decides the typed error, or (typed None) that the
call is retried. Each row cites where Google's wording was seen; the wordings themselves are the
patterns above the rows, and the typed errors' words (with the fix they name) the builders
between. Over the REST transport api_core raises `Forbidden`/`Unauthorized` for 403/401, which
are NOT subclasses of `PermissionDenied`/`Unauthenticated` (checked with api_core 2.44): both
families are matched. Import lazily: this pulls in google-api-core.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from google.api_core import exceptions as gexc

from tpujob.errors import (
    AUTH_HINT,
    AuthError,
    BillingDisabled,
    CloudRefused,
    ConflictError,
    InternalCreateError,
    LocationDenied,
    LoginProfileFull,
    NotFoundError,
    PermissionDenied,
    PlacementUnavailable,
    QuotaExceeded,
    ReservationUnavailable,
    ServiceDisabled,
    SlicePreempted,
    StockoutError,
    TpujobError,
)

_EXHAUSTED = (gexc.ResourceExhausted, gexc.TooManyRequests)  # gRPC 8 / HTTP 429
_FORBIDDEN = (gexc.PermissionDenied, gexc.Forbidden)  # gRPC 7 / HTTP 403 over REST
_UNAUTHENTICATED = (gexc.Unauthenticated, gexc.Unauthorized)  # gRPC 16 / HTTP 401 over REST
_INTERNAL = (gexc.InternalServerError,)  # gRPC 13 INTERNAL and HTTP 500 alike
_TRANSIENT = (gexc.TooManyRequests, gexc.InternalServerError, gexc.BadGateway,
              gexc.ServiceUnavailable, gexc.GatewayTimeout)
_RATE = re.compile(r"per ?minute|per ?second|requests per|rate limit", re.IGNORECASE)
_STOCKOUT = re.compile(r"no more capacity in the zone|not have enough resources available|"
                       r"insufficient reserved capacity", re.IGNORECASE)
_COMPUTE_STOCKOUTS = ("ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                      "RESOURCE_POOL_EXHAUSTED")
_QUOTA = re.compile(r"quota limit '([^']*)' has been exceeded|quota '([^']*)' (?:exhausted|exceeded)",
                    re.IGNORECASE)
_QUOTA_WHERE = re.compile(r"limit:?\s*[\d.]+\s+in\s+(region|zone)\s+([a-z0-9-]+)", re.IGNORECASE)
# The quota's own name says its scope when the wording names no place (TPU quota ids read
# TPUV...PerProjectPer{Zone,Region}ForTPUAPI: skypilot sky/backends/cloud_vm_ray_backend.py).
_QUOTA_SCOPE = re.compile(r"PerProjectPer(Zone|Region)", re.IGNORECASE)
# LOCATION_POLICY_VIOLATED's wording, as gcloud printed it for a TPU create in us-central2-b
# (sayouzone/gemma3-sft tpu/README.md): the ErrorInfo reason decides where present.
_LOCATION_POLICY = re.compile(r"permission denied on 'locations/([a-z0-9-]+)' \(or it may not exist\)",
                              re.IGNORECASE)
_RESERVATION = re.compile(r"reservation\b[^.;]*\b(?:not found|does not exist|was not found|"
                          r"does not have available resources)|"
                          r"target reservation must be specified", re.IGNORECASE)
_PREEMPTED = re.compile(r"not supported while in state PREEMPTED", re.IGNORECASE)
_BILLING = re.compile(r"requires billing to be enabled|has billing disabled|billing account for "
                      r"project '?\S+'? is not found|billing account[^.]* is disabled", re.IGNORECASE)
_FREE_TRIAL = re.compile(r"free[- ]trial billing account", re.IGNORECASE)
_USER_PROJECT = re.compile(r"caller does not have required permission to use project ([a-z0-9-]+)",
                           re.IGNORECASE)
_PROJECT = re.compile(r"projects/([a-z0-9-]+)", re.IGNORECASE)
_PLACEMENT = re.compile(r"could not be found in the zonal accelerator configurations|"
                        r"the accelerator \S+ was not found in zone|"
                        r"the requested zone \S+ is not supported|"
                        r"provisioning model is not supported for accelerator type|"
                        # the older wording SkyPilot matches (sky/provision/gcp/instance_utils.py)
                        r"received an invalid AcceleratorType", re.IGNORECASE)
_LOCATION = re.compile(r"location (\S+?) is not found or access is unauthorized", re.IGNORECASE)
_DISABLED = re.compile(r"has not been used in project \S+ before or it is disabled", re.IGNORECASE)
_SERVICE = re.compile(r"\b([a-z0-9-]+\.googleapis\.com)\b")
_PERMISSION = re.compile(r"permission '([a-z0-9.]+)' denied|required '([a-z0-9.]+)' permission|"
                         r"does not have ([a-z0-9]+\.[a-z0-9.]+) access", re.IGNORECASE)
# The predefined role that grants each service's permissions (Google's IAM "roles and
# permissions" pages: roles/tpu.admin holds tpu.*; Compute Storage Admin disks and snapshots;
# Storage Object Admin objects, Storage Admin buckets).
_ROLES = (("tpu.", "roles/tpu.admin"), ("compute.", "roles/compute.storageAdmin"),
          ("storage.objects.", "roles/storage.objectAdmin"), ("storage.", "roles/storage.admin"))


@dataclass(frozen=True)
class Answer:
    """One error answer: the exception, the API it came from, and whether it ended a create."""

    err: gexc.GoogleAPICallError
    what: str  # "creating node n1": the request, for the message
    service: str  # tpu.googleapis.com, compute.googleapis.com, storage.googleapis.com
    create_operation: bool = False  # the long-running operation of a create ended with it

    @property
    def text(self) -> str:
        return " ".join(str(self.err.message).split())

    @property
    def message(self) -> str:
        return f"{self.what}: {type(self.err).__name__}: {self.text}"

    @property
    def reason(self) -> str:
        """google.rpc.ErrorInfo's reason (api_core parses it from `error.details`; a Compute
        body's `errors[].reason` otherwise), or ""."""
        return self.err.reason or next((e.get("reason", "") for e in self.err.errors
                                        if isinstance(e, dict)), "")

    @property
    def info(self) -> dict[str, str]:
        """ErrorInfo's metadata (e.g. {"location": ZONE, "consumer": "projects/P", "service"})."""
        return dict(self.err.metadata or {})

    @property
    def violations(self) -> list[str]:
        """google.rpc.QuotaFailure's violations, "subject: description" each: over REST the
        details stay JSON dicts, from an operation's google.rpc.Status they are messages."""
        found = []
        for detail in self.err.details or ():
            if isinstance(detail, dict):
                if detail.get("@type", "").endswith("google.rpc.QuotaFailure"):
                    found += [f"{v.get('subject', '')}: {v.get('description', '')}"
                              for v in detail.get("violations", [])]
            elif type(detail).__name__ == "QuotaFailure":
                found += [f"{v.subject}: {v.description}" for v in detail.violations]
        return found

    @property
    def quota_text(self) -> str:
        return " ".join([self.text, *self.violations])


@dataclass(frozen=True)
class Rule:
    behaviour: str
    matches: Callable[[Answer], bool]
    typed: Callable[[Answer], TpujobError] | None  # None: retried (a CloudError once given up)
    source: str


def _quota(a: Answer) -> QuotaExceeded:
    text = a.quota_text
    where = _QUOTA_WHERE.search(text)
    named = _QUOTA_SCOPE.search(text)
    scope, place = (where.group(1).lower(), where.group(2)) if where else (None, None)
    scope = scope or (named.group(1).lower() if named else None)
    extra = "; ".join(v for v in a.violations if v.split(": ", 1)[-1] not in a.text)
    return QuotaExceeded(f"{a.message}{f' ({extra})' if extra else ''} (a quota increase, or "
                         "deleting slices that hold it, is what helps)",
                         region=place if scope == "region" else None,
                         zone=place if scope == "zone" else None, scope=scope)


def _location_policy(a: Answer) -> LocationDenied:
    named = _LOCATION_POLICY.search(a.text)
    zone = a.info.get("location") or (named.group(1) if named else None)
    return LocationDenied(f"{a.message} (LOCATION_POLICY_VIOLATED: this project may not use zone "
                          f"{zone or '(unnamed)'}, an organisation policy or a zone that needs "
                          "allowlisting; not a role or login problem: choose another zone)", zone=zone)


def _reservation(a: Answer) -> ReservationUnavailable:
    return ReservationUnavailable(f"{a.message} (a reservation problem: this zone has no reservation "
                                  "the request can use; another placement may work, or name an "
                                  "existing reservation)")


def _project(a: Answer, found: re.Match[str] | None = None) -> str:
    named = _PROJECT.search(a.info.get("consumer", "")) or _PROJECT.search(a.text)
    return (found.group(1) if found else None) or (named.group(1) if named else "PROJECT")


def _billing(a: Answer) -> BillingDisabled:
    if _FREE_TRIAL.search(a.text):
        return BillingDisabled(f"{a.message}; Cloud TPU is not available on a free-trial billing "
                               "account: upgrade it to a paid account in the console's Billing page")
    return BillingDisabled(f"{a.message}; billing is disabled for the project: link a billing account "
                           f"(gcloud billing projects link {_project(a)} --billing-account=ACCOUNT_ID)")


def _user_project(a: Answer) -> PermissionDenied:
    project = _project(a, _USER_PROJECT.search(a.text))
    return PermissionDenied(f"{a.message}; the account may not use project {project}: grant it "
                            f"roles/serviceusage.serviceUsageConsumer there (gcloud projects "
                            f"add-iam-policy-binding {project} --member=ACCOUNT "
                            "--role=roles/serviceusage.serviceUsageConsumer)")


def _permission(a: Answer) -> PermissionDenied:
    found = _PERMISSION.search(a.text)
    permission = next((g for g in found.groups() if g), None) if found else None
    permission = permission or (a.err.metadata or {}).get("permission")
    if not permission:
        return PermissionDenied(f"{a.message}; check the project and the account's roles, or {AUTH_HINT}")
    role = next((r for prefix, r in _ROLES if permission.startswith(prefix)), None)
    grant = f"grant the account a role holding it (e.g. {role})" if role else "grant it to the account"
    return PermissionDenied(f"{a.message}; the account lacks permission {permission}: {grant}")


def _disabled(a: Answer) -> ServiceDisabled:
    named = _SERVICE.search(a.text)
    service = (a.err.metadata or {}).get("service") or (named.group(1) if named else a.service)
    return ServiceDisabled(f"{a.message}; enable the API: gcloud services enable {service}")


def _location(a: Answer) -> PlacementUnavailable:
    found = _LOCATION.search(a.text)  # always: the rule that calls this matched it
    zone = found.group(1).rstrip(".") if found else "?"
    return PlacementUnavailable(f"{a.message} (the project cannot use location {zone}: a "
                                "fallback placement in another zone may work)")


def _reason(a: Answer) -> str:
    return a.reason


RULES: tuple[Rule, ...] = (
    Rule("request-rate quota (429 'per minute'): retried with backoff",
         lambda a: isinstance(a.err, _EXHAUSTED) and bool(_RATE.search(a.text)), None,
         "marin PR #6198 (\"Maximum number of CreateNode requests per minute\"); api_core 429"),
    Rule("no capacity (operation code 8 'There is no more capacity in the zone ...', code 9 "
         "'Insufficient reserved capacity'): StockoutError, backoff then the next placement",
         lambda a: bool(_STOCKOUT.search(a.text)) and isinstance(
             a.err, (*_EXHAUSTED, gexc.FailedPrecondition)),
         lambda a: StockoutError(a.message),
         "terraform-provider-google#10222 / magic-modules#7297 (\"Error code 8, message: There is "
         "no more capacity in the zone\"); SkyPilot sky/backends failover handler (codes 8, 9); "
         "skypilot#4579"),
    Rule("Compute Engine has no capacity (operation errors[].code ZONE_RESOURCE_POOL_EXHAUSTED, "
         "_WITH_DETAILS or RESOURCE_POOL_EXHAUSTED, \"The zone '...' does not have enough resources "
         "available to fulfill the request.\", HTTP 503 on the operation): StockoutError, backoff then "
         "the next placement; quota cannot fix it",
         lambda a: a.reason in _COMPUTE_STOCKOUTS or (a.service == "compute.googleapis.com"
                                                        and bool(_STOCKOUT.search(a.text))),
         lambda a: StockoutError(a.message),
         "cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability "
         "(official: the code and wording); scylladb/scylla-cluster-tests#12477 (the 503 on the "
         "operation); kubernetes/autoscaler cloudprovider/gce (RESOURCE_POOL_EXHAUSTED)"),
    Rule("resource quota spent (429 \"Quota limit '...' has been exceeded. Limit: 0 in region R\", "
         "QuotaFailure \"Quota '...' exhausted. Limit N in region R\" or \"... in zone Z\", in the "
         "message or in google.rpc.QuotaFailure violations): QuotaExceeded with its scope (zone or "
         "region, from the wording or the quota's PerProjectPer{Zone,Region} name)",
         lambda a: bool(_QUOTA.search(a.quota_text)), _quota,
         "marin PR #1612; marin#87; SkyPilot failover handler (google.rpc.QuotaFailure branch); "
         "sayouzone/gemma3-sft tpu/README.md (\"Quota 'TPUV5sLitepodServingPerProjectPerZoneForTPUAPI' "
         "exhausted. Limit 4 in zone us-central1-a\")"),
    Rule("INTERNAL (code 13) or Compute's INTERNAL_ERROR (HTTP 500 or 503) ending a create operation: "
         "InternalCreateError, a capacity miss (backoff, the next placement, within max_capacity_retries), "
         "never retried in place",
         lambda a: a.create_operation and (isinstance(a.err, _INTERNAL) or a.reason == "INTERNAL_ERROR"),
         lambda a: InternalCreateError(f"{a.message} (treated as a capacity miss)"),
         "issue 10 (item 6): reported for spot v5e stockouts (anecdotal; no public payload); a Compute "
         "insert's 503 when provisioning read as no capacity: dstackai/dstack#488, ray-project/ray#6790 "
         "(user reports)"),
    Rule("accelerator or provisioning model not offered in the zone, zone without TPUs "
         "(INVALID_ARGUMENT): PlacementUnavailable",
         lambda a: isinstance(a.err, gexc.BadRequest) and bool(_PLACEMENT.search(a.text)),
         lambda a: PlacementUnavailable(a.message),
         "skypilot#3840 (\"the accelerator v4-128 was not found in zone\"); sayouzone/gemma3-sft "
         "tpu/README.md (gcloud tpu-vm create: \"could not be found in the zonal accelerator "
         "configurations\"); \"The requested zone ... is not supported\": gcloud queued-resources "
         "output in a public zone probe (user report)"),
    Rule("operation code 3 \"update is not supported while in state PREEMPTED\": the slice was "
         "preempted under the call, SlicePreempted (a preemption, not a refusal)",
         lambda a: bool(_PREEMPTED.search(a.text)), lambda a: SlicePreempted(a.message),
         "SkyPilot sky/backends/cloud_vm_ray_backend.py (\"Error code 3 means TPU is preempted during "
         "creation\", quoting {'code': 3, 'message': 'Cloud TPU received a bad request. update is not "
         "supported while in state PREEMPTED [EID: 0x73013519f5b7feb2]'})"),
    Rule("403 ErrorInfo LOCATION_POLICY_VIOLATED (\"Permission denied on 'locations/Z' (or it may "
         "not exist).\"): LocationDenied naming Z, a placement this project may not use",
         lambda a: a.reason == "LOCATION_POLICY_VIOLATED" or bool(_LOCATION_POLICY.search(a.text)),
         _location_policy,
         "sayouzone/gemma3-sft tpu/README.md (gcloud tpu-vm create in us-central2-b: ErrorInfo reason "
         "LOCATION_POLICY_VIOLATED, metadata {consumer, location, service: tpu.googleapis.com})"),
    Rule("a reservation the request needs is missing (\"Reservation ... not found\", \"A target "
         "reservation must be specified ...\"): ReservationUnavailable, the next placement",
         lambda a: bool(_RESERVATION.search(a.text)) and not isinstance(a.err, _EXHAUSTED), _reservation,
         "hashicorp/terraform-provider-google#24153 (\"Error code 3, message: Cloud TPU received an "
         "invalid argument. A target reservation must be specified when the host project has at least "
         "one ...\"); \"Reservation not found\": issue 22's wording, no public TPU payload found; "
         "Compute Engine's \"Specified reservation 'R' does not exist.\" and \"... does not have available "
         "resources for the request.\" (kubernetes/autoscaler cloudprovider/gce)"),
    Rule("403 billing disabled (ErrorInfo BILLING_DISABLED, \"This API method requires billing to be "
         "enabled\", \"has billing disabled\") or a free-trial billing account: BillingDisabled with "
         "the billing fix (exit 6)",
         lambda a: isinstance(a.err, _FORBIDDEN) and (a.reason == "BILLING_DISABLED" or bool(
             _BILLING.search(a.text)) or bool(_FREE_TRIAL.search(a.text))), _billing,
         "GoogleCloudPlatform/php-docs-samples#1235 (ErrorInfo BILLING_DISABLED, metadata {service, "
         "consumer}); GoogleCloudPlatform/java-docs-samples#276 (\"has billing disabled\"); "
         "tensorflow/tpu#124 (\"cannot create a TPU Node on a project linked to a free-trial billing "
         "account\")"),
    Rule("403 ErrorInfo USER_PROJECT_DENIED (\"Caller does not have required permission to use "
         "project P\"): PermissionDenied naming roles/serviceusage.serviceUsageConsumer on P",
         lambda a: isinstance(a.err, _FORBIDDEN) and (a.reason == "USER_PROJECT_DENIED" or bool(
             _USER_PROJECT.search(a.text))), _user_project,
         "lbjlaq/Antigravity-Manager#3050 (full body: ErrorInfo USER_PROJECT_DENIED, metadata "
         "{consumer, containerInfo, service}); google-github-actions/auth#250"),
    Rule("403 \"Location Z is not found or access is unauthorized\": PlacementUnavailable naming Z",
         lambda a: bool(_LOCATION.search(a.text)), _location,
         "SkyPilot sky/backends failover handler and sky/provision/gcp/instance_utils.py"),
    Rule("403 SERVICE_DISABLED (\"... API has not been used in project P before or it is "
         "disabled\"): ServiceDisabled, exit 6 with `gcloud services enable API`",
         lambda a: _reason(a) in ("SERVICE_DISABLED", "accessNotConfigured")
         or bool(_DISABLED.search(a.text)), _disabled,
         "GoogleCloudPlatform/emblem#757; google-gemini generative-ai-android#148 (ErrorInfo "
         "SERVICE_DISABLED, metadata.service)"),
    Rule("403 \"Permission 'P' denied on ...\" / Compute \"Required 'P' permission\": "
         "PermissionDenied naming P and a role that grants it (exit 6)",
         lambda a: isinstance(a.err, _FORBIDDEN), _permission,
         "tensorflow/tpu#296 (\"Permission 'tpu.nodes.get' denied on ...\"); tensorflow/tpu#859 "
         "(Compute-style errors[].reason forbidden)"),
    Rule("401 UNAUTHENTICATED: AuthError with the login hint (exit 6); the sweep retries it",
         lambda a: isinstance(a.err, _UNAUTHENTICATED),
         lambda a: AuthError(f"{a.message}; {AUTH_HINT}"), "api_core: Unauthorized over REST"),
    Rule("404: NotFoundError", lambda a: isinstance(a.err, gexc.NotFound),
         lambda a: NotFoundError(a.message), "api_core"),
    Rule("409: ConflictError (a create that got through earlier is adopted)",
         lambda a: isinstance(a.err, (gexc.AlreadyExists, gexc.Conflict)),
         lambda a: ConflictError(a.message), "api_core"),
    Rule("an organisation policy's refusal (Compute 412 conditionNotMet \"Constraint constraints/C "
         "violated for project ...\"): CloudRefused, never retried",
         lambda a: isinstance(a.err, gexc.PreconditionFailed) and "violated for project" in a.text,
         lambda a: CloudRefused(a.message),
         "GoogleCloudPlatform/solutions-builder docs/TROUBLESHOOTING.md (constraints/compute."
         "requireShieldedVm, 412 conditionNotMet); tests/fixtures/gcp_errors/org_policy_violated.json"),
    Rule("OS Login's 400 \"Login profile size exceeds 32 KiB. Delete profile values to make additional "
         "space.\": LoginProfileFull, whose fix is removing old keys (no role helps)",
         lambda a: isinstance(a.err, gexc.BadRequest) and "Login profile size exceeds" in a.text,
         lambda a: LoginProfileFull(f"{a.message} (the account's OS Login profile is full of SSH keys: remove "
                                    "old ones: `gcloud compute os-login ssh-keys list`, then `gcloud compute "
                                    "os-login ssh-keys remove --key=KEY` for each stale one; then `tpujob resume`)"),
         "cloud.google.com/compute/docs/troubleshooting/troubleshoot-os-login (INVALID_ARGUMENT, the 32 KiB "
         "limit); kyma-project/test-infra#93, skypilot#2475, terratest#536 quote the words (user reports: the "
         "fix that worked was removing keys); tests/fixtures/gcp_errors/oslogin_profile_full.json"),
    Rule("other 400 (INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE): CloudRefused",
         lambda a: isinstance(a.err, gexc.BadRequest), lambda a: CloudRefused(a.message), "api_core"),
    Rule("other 429, 500, 502, 503, 504: retried with backoff",
         lambda a: isinstance(a.err, _TRANSIENT), None, "api_core; Google's retry guidance"),
)
