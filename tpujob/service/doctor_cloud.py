"""`tpujob doctor`'s cloud checks: credentials, project, the Cloud TPU and Compute APIs, the
accelerators of the jobs on record in their zones, and their buckets.

On gcp they ask Google with Application Default Credentials; on the local cloud they ask the
running emulator the same way (anonymous credentials), so every check is exercised in tests.
One cheap call per API: a list in one zone. The cloud libraries are imported here only.
"""

from __future__ import annotations

import re
from typing import Any

from tpujob.errors import AUTH_HINT, AuthError, TpujobError
from tpujob.preflight import ERROR, OK, WARNING, Check
from tpujob.service.context import Context

# A zone for the API checks when neither the settings nor a job names one: any TPU zone answers
# an enabled API's list with a list (empty or not).
DEFAULT_ZONE = "us-central1-a"
_RETRY_DEADLINE = 20.0  # seconds of retries on 429/503: a checklist should not hang
# Google's 403 for a disabled API: "Cloud TPU API has not been used in project 123 before or it
# is disabled. Enable it by visiting https://console.developers.google.com/apis/api/
# tpu.googleapis.com/overview?project=123 then retry." with reason SERVICE_DISABLED (quoted in
# GoogleCloudPlatform/emblem#757 and vertex-ai-samples#476).
_DISABLED = re.compile(r"has not been used in project|or it is disabled|SERVICE_DISABLED", re.IGNORECASE)


def checks(ctx: Context, jobs: list | None) -> list[Check]:
    settings = ctx.settings
    if settings.cloud == "local":
        from tpujob.emulator import process

        info = process.status()
        if info is None:
            return [Check("emulator", WARNING, "the local emulator is not running: the cloud checks "
                          "(APIs, zones, buckets) need it", "tpujob emulator start")]
        credentials = None
        found = [Check("credentials", OK, f"anonymous, against the local emulator at {info['tpu_endpoint']}"),
                 Check("project", OK, f"{settings.effective_project} (on the local emulator)")]
        project = settings.effective_project
    else:
        credential_check, credentials, adc_project = adc_check()
        project = settings.effective_project or adc_project
        found = [credential_check, project_check(project)]
        if credential_check.status == ERROR or not project:
            return found  # every call below would fail the same way
        info = None
    jobs = jobs or []
    zone = settings.zone or next((j.zone for j in jobs), "") or DEFAULT_ZONE
    cloud, compute = _clients(info, credentials)
    tpu = api_check("Cloud TPU API", "tpu.googleapis.com", project,
                    lambda: cloud.list_nodes(project, zone), zone)
    found += [tpu, api_check("Compute Engine API", "compute.googleapis.com", project,
                             lambda: compute.list_disks(project, zone), zone)]
    if found[-1].status == OK:  # the Compute Engine API answers
        found.append(quotas_check(compute, project, settings.zone, jobs))
    if tpu.status == OK:
        found.append(accelerators_check(cloud, jobs))
        found.append(orphans_check(ctx, cloud, compute))
    found.append(oslogin_check(ctx, project, info, credentials))
    found.append(cloud_clock_check(info["tpu_endpoint"] if info is not None else GOOGLE_CLOCK_URL,
                                   "the emulator's" if info is not None else "Google's"))
    found.append(buckets_check(settings, info, credentials, project, jobs))
    return found


# ---- credentials and project --------------------------------------------------------------------

def adc() -> tuple[Any, str | None]:
    """Application Default Credentials and their project (replaced in tests)."""
    import google.auth

    return google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])


def refresh(credentials: Any) -> None:
    """A fresh access token: proves the credentials are not expired or revoked."""
    from google.auth.transport.requests import Request

    credentials.refresh(Request())


def adc_check() -> tuple[Check, Any, str]:
    from google.auth import exceptions as auth_exc

    try:
        credentials, project = adc()
    except auth_exc.DefaultCredentialsError as exc:
        return Check("credentials", ERROR, f"no Application Default Credentials ({_first_line(exc)})",
                     "gcloud auth application-default login"), None, ""
    try:
        refresh(credentials)
    except (auth_exc.RefreshError, auth_exc.TransportError) as exc:
        return Check("credentials", ERROR, f"Application Default Credentials cannot get a token, expired "
                     f"or revoked? ({_first_line(exc)})", "gcloud auth application-default login"), None, ""
    who = getattr(credentials, "service_account_email", None) or getattr(credentials, "account", None) or ""
    kind = type(credentials).__module__.rsplit(".", 1)[-1]
    return Check("credentials", OK, f"Application Default Credentials ({kind}{', ' + who if who else ''})"), \
        credentials, project or ""


def project_check(project: str) -> Check:
    if project:
        return Check("project", OK, project)
    return Check("project", ERROR, "no project: neither the settings nor the credentials name one",
                 "tpujob config set project PROJECT_ID")


# ---- APIs ---------------------------------------------------------------------------------------

def _clients(info: dict | None, credentials: Any) -> tuple[Any, Any]:
    """Both TPU APIs behind one TpuApis (the orphans check counts Compute Engine's slices as
    `tpujob gc` does; its client is built only when asked), and the disks' client."""
    from tpujob.clients import tpu_apis
    from tpujob.cloud.disks import GcpCompute

    endpoints = info or {}  # the emulator's; not asked for on Google
    apis = tpu_apis(credentials, lambda: endpoints, retry_deadline=_RETRY_DEADLINE)
    if info is not None:
        return apis, GcpCompute.for_emulator(info["compute_endpoint"], info["tpu_endpoint"])
    return apis, GcpCompute(credentials=credentials, retry_deadline=_RETRY_DEADLINE)


def is_service_disabled(exc: BaseException) -> bool:
    """Google's 403 for an API the project has not enabled, however the cloud layer typed it
    (the original google.api_core exception is the typed error's cause)."""
    seen: BaseException | None = exc
    while seen is not None:
        if _DISABLED.search(str(seen)):
            return True
        reason = getattr(seen, "reason", None)
        if reason == "SERVICE_DISABLED":
            return True
        seen = seen.__cause__
    return False


def api_check(title: str, service: str, project: str, call, zone: str) -> Check:
    name = f"{service.split('.')[0]} api"
    try:
        call()
    except TpujobError as exc:
        if is_service_disabled(exc):
            return Check(name, ERROR, f"the {title} is not enabled in project {project}",
                         f"gcloud services enable {service} --project {project}")
        if isinstance(exc, AuthError):
            return Check(name, ERROR, exc.message, AUTH_HINT)
        return Check(name, ERROR, exc.message,
                     f"check that project {project} exists and your account may use the {title} in {zone}")
    return Check(name, OK, f"enabled (listed {zone})")


# ---- what the jobs on record need ---------------------------------------------------------------

def accelerators_check(cloud, jobs: list) -> Check:
    """Each active job's zone offers its accelerator (acceleratorTypes.list, once per zone)."""
    wanted = sorted({(j.project, j.zone, j.accelerator) for j in jobs})
    if not wanted:
        return Check("accelerators", OK, "no active jobs on record")
    offered: dict[tuple[str, str], set[str]] = {}
    missing = []
    for project, zone, accelerator in wanted:
        if (project, zone) not in offered:
            try:
                offered[(project, zone)] = set(cloud.accelerator_types(project, zone))
            except TpujobError as exc:
                return Check("accelerators", WARNING, f"could not list the accelerator types of {zone}: "
                             f"{exc.message}")
        if accelerator not in offered[(project, zone)]:
            missing.append(f"{accelerator} in {zone}")
    if missing:
        return Check("accelerators", ERROR, f"not offered: {', '.join(missing)} (acceleratorTypes.list)",
                     "pick a zone that offers it (gcloud compute tpus accelerator-types list --zone ZONE) "
                     "and re-create the job there")
    return Check("accelerators", OK, ", ".join(f"{a} in {z}" for _, z, a in wanted))


# Google's quota page, where a project sees and requests its quotas (Cloud TPU's quota page,
# cloud.google.com/tpu/docs/quota, "Request additional quota").
QUOTA_PAGE = "https://console.cloud.google.com/iam-admin/quotas"
_WAITING = ("PENDING", "PROVISIONING")  # a job's states before it holds a slice: what a full quota stops


def quotas_check(compute, project: str, zone: str, jobs: list) -> Check:
    """The Compute quotas the Compute Engine path draws on: each TPU metric of each region its
    active jobs (and the configured zone) use (compute.regions.get, once per region), and
    GPUS_ALL_REGIONS (compute.projects.get). The metric names are read from what Google lists,
    never assumed: the client's Quota.Metric enum names no TPU metric. What unit a TPU metric
    counts (chips, cores, VMs) is not documented for this path, so no arithmetic on the jobs'
    chips; and which metric a job draws on is not known by name, so a TPU metric at 0 warns
    only when every TPU metric of the region is at 0 (Cloud TPU's quota page: "different quotas
    for each version of TPU", each on-demand and preemptible, on-demand's default 0 for most).
    Warnings: no TPU metric listed, every one at 0, one used up while a job waits in its
    region, GPUS_ALL_REGIONS at 0; anything else is usage/limit."""
    from tpujob.attempt.buckets import region_of
    from tpujob.catalogue import COMPUTE
    from tpujob.spec.stored import api_of

    on_compute = [j for j in jobs if api_of(j) == COMPUTE]
    if not on_compute:
        return Check("compute quotas", OK, "no active Compute Engine job (api: compute): not read")
    places = sorted({(j.project, region_of(j.zone)) for j in on_compute} |
                    ({(project, region_of(zone))} if zone else set()))
    waiting = {(j.project, region_of(j.zone)) for j in on_compute if j.state in _WAITING}
    seen, warnings = [], []
    try:
        for where, region in places:
            tpu = [q for q in compute.quotas(where, region) if "TPU" in q.metric.upper()]
            if not tpu:
                warnings.append(f"no TPU quota is visible for project {where} in {region}")
            elif all(q.limit == 0 for q in tpu):
                warnings.append(f"every TPU quota of project {where} in {region} has a limit of 0")
            for q in tpu:
                seen.append(f"{q.metric} {q.usage:g}/{q.limit:g} in {region}")
                if (where, region) in waiting and 0 < q.limit <= q.usage:
                    warnings.append(f"{q.metric} is used up in {region} ({q.usage:g}/{q.limit:g}) while a "
                                    "job waits there")
        for where in sorted({p for p, _ in places}):
            for q in compute.quotas(where):
                if q.metric == "GPUS_ALL_REGIONS":
                    seen.append(f"GPUS_ALL_REGIONS {q.usage:g}/{q.limit:g}")
                    if q.limit == 0:
                        warnings.append(f"GPUS_ALL_REGIONS of project {where} has a limit of 0")
    except TpujobError as exc:
        return Check("compute quotas", WARNING, f"could not read the Compute quotas: {exc.message}")
    listed = "; ".join(seen) or "none listed"
    if warnings:
        return Check("compute quotas", WARNING, f"{'; '.join(warnings)} (usage/limit: {listed})",
                     f"request quota at {QUOTA_PAGE}")
    return Check("compute quotas", OK, f"usage/limit: {listed}")


def orphans_check(ctx: Context, cloud, compute) -> Check:
    """What `tpujob gc` would list: the same single batched pass (one list per zone and kind)."""
    from tpujob.errors import UsageError
    from tpujob.service import gc

    try:
        found = gc.find(ctx, cloud=cloud, compute=compute)
    except UsageError as exc:  # no zone on record yet: nothing made, nothing left over
        return Check("orphans", OK, f"not looked for: {exc.message}")
    except TpujobError as exc:
        return Check("orphans", WARNING, f"could not look for leftovers: {exc.message}")
    if not found:
        return Check("orphans", OK, "0 leftover resources (tpujob gc)")
    cost = sum(x.cost_per_hour_usd or 0 for x in found)
    return Check("orphans", WARNING, f"{len(found)} leftover resource{'s' if len(found) > 1 else ''} no "
                 f"active job owns, about ${cost:.2f}/h", "tpujob gc (then tpujob gc --yes)")


def oslogin_check(ctx: Context, project: str, info: dict | None, credentials: Any) -> Check:
    """OS Login in the project (its enable-oslogin metadata), whether tpujob's key is in the
    account's OS Login profile and the user it logs in as, and what `ssh_os_login: false`
    does there. Only reads: the key is imported by the next setup, not here."""
    from tpujob.attempt.logins import POLICY_NOTE
    from tpujob.clients import credentials_email
    from tpujob.cloud.oslogin import GcpOsLogin
    from tpujob.hosts.keys import key_path, public_key_line

    settings = ctx.settings
    try:
        if info is not None:
            client = GcpOsLogin.for_emulator(info.get("oslogin_endpoint") or info["tpu_endpoint"],
                                             retry_deadline=_RETRY_DEADLINE)
        else:
            client = GcpOsLogin(credentials=credentials, retry_deadline=_RETRY_DEADLINE)
        enabled = client.project_enabled(project)
    except TpujobError as exc:
        return Check("os login", WARNING, f"could not read project {project}'s enable-oslogin: {exc.message}")
    if settings.os_login_opt_out:
        detail = (f"{'on' if enabled else 'off'} in project {project}; ssh_os_login false: nodes are created "
                  f"with enable-oslogin FALSE and tpujob logs in as {settings.ssh_user} with the key in their "
                  f"ssh-keys metadata; {POLICY_NOTE}")
        if enabled:
            return Check("os login", WARNING, detail, "tpujob config set ssh_os_login true")
        return Check("os login", OK, detail)
    if not enabled:
        return Check("os login", OK, f"off in project {project}: tpujob logs in as {settings.ssh_user} with the "
                     "key in the nodes' ssh-keys metadata")
    try:
        if info is not None:
            from tpujob.clients import login_account

            account = login_account(settings)
        else:
            account = credentials_email(credentials)
        profile = client.login_profile(account, project)
    except TpujobError as exc:
        return Check("os login", ERROR, f"on in project {project}, and the OS Login profile cannot be read: "
                     f"{exc.message}", "grant the account roles/compute.osLogin on the project and enable "
                     "oslogin.googleapis.com, or tpujob config set ssh_os_login false")
    registered = key_path(settings.home).exists() and profile.holds(public_key_line(settings.home))
    user = profile.username or "(none yet: OS Login makes one at the first import)"
    # Setup mounts disks and buckets and cleans up with sudo on the hosts: under OS Login only
    # roles/compute.osAdminLogin gives sudo ("Log in to a Compute Engine instance as an
    # administrator"; roles/compute.osLogin logs in "as a non-administrator user": Google's
    # role descriptions, cloud.google.com/compute/docs/access/iam), said before a setup fails.
    return Check("os login", OK, f"on in project {project}: tpujob's key is "
                 f"{'registered' if registered else 'not registered yet (the next setup registers it)'} in the "
                 f"OS Login profile of {account}; it logs in as {user}; setup mounts and cleans up with sudo, "
                 f"which needs roles/compute.osAdminLogin for {account} (roles/compute.osLogin alone gives no "
                 f"sudo); {LAB_ROLES}; with ssh_os_login false "
                 f"nodes would opt out (enable-oslogin FALSE), which {POLICY_NOTE.split(' (')[0]} may refuse")


# What a sweeping account needs in a lab under OS Login (attempt/hosts.py, SshHostOps.login).
LAB_ROLES = ("roles/compute.osLogin lets this node in as its own user only: in a lab, reading and stopping "
             "the program of a job another account started takes sudo as that account's user, "
             "roles/compute.osAdminLogin (without it this node leaves such jobs alone and says so)")


# Any Google front end answers with its Date header (RFC 9110 section 6.6.1: an origin server
# with a clock sends one), whatever the status: the Cloud TPU API's own host is asked.
GOOGLE_CLOCK_URL = "https://tpu.googleapis.com/"


def cloud_clock_check(url: str, whose: str) -> Check:
    """This node's clock against Google's (or the emulator's): the Date header of one HEAD
    request. tpujob judges no age of Google's on this node's clock (a run dir's heartbeat is
    aged on the storage service's, cloud/gcs.py), but Google refuses credentials minutes off."""
    import urllib.error
    import urllib.request

    from tpujob.clocks import date_header_offset, node_time
    from tpujob.service.doctor import CLOCK_FIX, SKEW_WARNING_SECONDS, skew_text

    before = node_time()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10) as answer:
            date = answer.headers.get("Date")
    except urllib.error.HTTPError as exc:  # a 404 still carries the server's Date
        date = exc.headers.get("Date")
    except OSError as exc:
        return Check("clock: cloud", WARNING, f"could not ask {url} for {whose} clock: {exc}")
    offset = date_header_offset(date, before, node_time())
    if offset is None:
        return Check("clock: cloud", WARNING, f"{url} answered without a readable Date header ({date!r})")
    detail = f"{skew_text(-offset, whose)} (the Date header of {url}, to a second)"
    if abs(offset) > SKEW_WARNING_SECONDS:
        return Check("clock: cloud", WARNING, detail, CLOCK_FIX)
    return Check("clock: cloud", OK, detail)


def buckets_check(settings, info: dict | None, credentials: Any, project: str, jobs: list) -> Check:
    """Each active job's buckets (run dir included) exist and sit in its slice's region."""
    from tpujob.attempt import buckets, run_dirs
    from tpujob.errors import MissingBucket
    from tpujob.spec.stored import spec_of

    specs = [spec_of(j) for j in jobs]
    specs = [s for s in specs if s.spec.buckets or run_dirs.run_dir_location(s, 0)]
    if not specs:
        return Check("buckets", OK, "no active job mounts a bucket")
    from tpujob.cloud.gcs import Gcs

    gcs = Gcs(_storage_client(settings, info, credentials, project))
    warnings, checked = [], set()
    for spec in specs:
        try:
            warnings += buckets.check_bucket_regions(gcs, spec, strict=False, cloud=settings.cloud)
        except MissingBucket as exc:
            return Check("buckets", ERROR, f"bucket {exc.bucket} does not exist", exc.fix)
        checked.add(buckets.region_of(spec.zone))
    if warnings:
        return Check("buckets", WARNING, "; ".join(dict.fromkeys(warnings)),
                     "move the data to a bucket in the slice's region, or the job to the bucket's")
    return Check("buckets", OK, f"every bucket of {len(specs)} active job{'s' if len(specs) > 1 else ''} "
                 f"exists, in {', '.join(sorted(checked))}")


def _storage_client(settings, info: dict | None, credentials: Any, project: str):
    from google.cloud import storage as gcs_lib  # type: ignore[attr-defined]  # it ships no type information

    if info is None:
        return gcs_lib.Client(project=project, credentials=credentials)
    from tpujob.clients import make_storage

    return make_storage(settings, start_emulator=False)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
