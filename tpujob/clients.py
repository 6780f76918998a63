"""The one place that chooses Google or the local emulator: every cloud client tpujob
uses (TPU, Compute Engine, Cloud Storage, OS Login) is made here, from the settings, with
Application Default Credentials on Google or the emulator's endpoints (started if needed)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tpujob.errors import ConfigError
from tpujob.settings import Settings

if TYPE_CHECKING:
    from tpujob.cloud.apis import TpuApis


def make_cloud(settings: Settings, start_emulator: bool = True, *, on_first_use: bool = False):
    """The Cloud for the configured target: Google (ADC), or the local emulator, started first
    unless `start_emulator` is off (a look, e.g. `show`, starts nothing). With `on_first_use`,
    the local emulator is started (and the TPU API's client imported) when a call first needs
    it: a sweep with no job to look at then starts nothing, where a `requeue` from cron would
    otherwise leave an idle emulator running in a home with no jobs."""
    from tpujob.catalogue import TPU_VM

    labels = store_labels(settings)
    credentials = _google_credentials() if settings.cloud == "gcp" else None  # refused now, not mid-sweep

    @functools.cache  # started (or looked for) once, by whichever client is built first
    def emulator() -> dict:
        return local_emulator(start_emulator)

    apis = tpu_apis(credentials, emulator, labels=labels)
    if not on_first_use:
        apis.for_api(TPU_VM)  # the emulator started (or found not running) now
    return apis


def tpu_apis(credentials: Any, endpoints: Callable[[], dict], *, labels: dict[str, str] | None = None,
             retry_deadline: float | None = None) -> TpuApis:
    """Both TPU APIs (Cloud TPU's nodes, Compute Engine's TPU VMs) behind one TpuApis, each
    client built, its library imported, on its first call: on Google with `credentials`, else
    on the local emulator at `endpoints()`. `retry_deadline`: seconds a call retries 429/503
    (the clients' own default when None)."""
    from tpujob.cloud.apis import TpuApis

    options: dict[str, Any] = {"labels": labels}
    if retry_deadline is not None:
        options["retry_deadline"] = retry_deadline

    def tpu_vm():
        from tpujob.cloud.tpu_api import GcpCloud

        if credentials is not None:
            return GcpCloud(credentials=credentials, **options)
        return GcpCloud.for_emulator(endpoints()["tpu_endpoint"], **options)

    def compute():  # google-cloud-compute is slow to import: built on a compute job's first call
        from tpujob.cloud.compute_tpu import ComputeTpuCloud

        if credentials is not None:
            return ComputeTpuCloud(credentials=credentials, **options)
        return ComputeTpuCloud.for_emulator(endpoints()["compute_endpoint"], **options)

    return TpuApis(tpu_vm, compute)


def local_emulator(start: bool = True) -> dict:
    """The local emulator's endpoints: started when it is not running, unless `start` is off,
    then ConfigError (exit 6) naming the command that starts it."""
    from tpujob.emulator import process

    info = process.ensure_running() if start else process.status()
    if info is None:
        raise ConfigError("the local emulator is not running (`tpujob emulator start`)")
    return info


def store_labels(settings: Settings) -> dict[str, str]:
    """The label every resource this store creates carries: its id (`tpujob gc` tells this
    store's orphans from another store's by it)."""
    from tpujob.names import STORE_LABEL
    from tpujob.store.db import engine_for
    from tpujob.store.identity import store_id

    return {STORE_LABEL: store_id(engine_for(settings.database_url))}


def adc_project() -> str:
    """ADC's project, or "" when ADC has none (resolution then asks for one by name)."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        return google.auth.default()[1] or ""
    except DefaultCredentialsError:
        return ""


def _google_credentials():
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        return google.auth.default()[0]
    except DefaultCredentialsError as exc:
        raise ConfigError("no Google credentials: run `gcloud auth application-default login` "
                          "or set GOOGLE_APPLICATION_CREDENTIALS") from exc


def make_compute(settings: Settings):
    """Disks and snapshots (google-cloud-compute) on Google, or on the local emulator."""
    from tpujob.cloud.disks import GcpCompute

    if settings.cloud == "gcp":
        return GcpCompute(credentials=_google_credentials(), labels=store_labels(settings))
    info = local_emulator()
    return GcpCompute.for_emulator(info["compute_endpoint"], info["tpu_endpoint"],
                                   labels=store_labels(settings))


def make_oslogin(settings: Settings):
    """OS Login and the project's metadata (google-cloud-os-login, -compute) on Google, or on the
    local emulator (started if needed)."""
    from tpujob.cloud.oslogin import GcpOsLogin

    if settings.cloud == "gcp":
        return GcpOsLogin(credentials=_google_credentials())
    from tpujob.emulator import process

    info = process.ensure_running()
    return GcpOsLogin.for_emulator(info.get("oslogin_endpoint") or info["tpu_endpoint"])


def login_account(settings: Settings) -> str:
    """The account whose OS Login profile holds tpujob's key: on the local cloud the emulator's
    own (anonymous credentials carry none); on gcp the email of Application Default Credentials,
    read from the credentials where they hold it (a service account key, an impersonated
    account, `account` in an authorized-user file), else from the ID token a refresh brings
    (gcloud's application-default login asks for the email scope). On the local cloud,
    TPUJOB_EMULATOR_ACCOUNT names another account (the emulator cannot tell who calls it): a
    lab's test gives each node its own person."""
    if settings.cloud != "gcp":
        from tpujob.emulator import process

        named = os.environ.get("TPUJOB_EMULATOR_ACCOUNT", "").strip()
        return named or process.ensure_running().get("account") or ""
    return credentials_email(_google_credentials())


def credentials_email(credentials) -> str:
    email = getattr(credentials, "service_account_email", None) or getattr(credentials, "account", None)
    if email and email != "default":  # Compute Engine's is "default" until refreshed
        return email
    from google.auth.exceptions import GoogleAuthError
    from google.auth.transport.requests import Request

    try:
        credentials.refresh(Request())
    except GoogleAuthError as exc:
        raise ConfigError(f"Google credentials cannot get a token ({exc}); gcloud auth "
                          "application-default login") from exc
    email = getattr(credentials, "service_account_email", None)
    if email and email != "default":
        return email
    token = getattr(credentials, "id_token", None)
    if token:
        from google.auth import jwt

        email = jwt.decode(token, verify=False).get("email")
        if email:
            return email
    raise ConfigError("OS Login needs the email of the Google account tpujob acts as, and the "
                      "credentials do not say it: run `gcloud auth application-default login` "
                      "(it asks for the email scope), or set `tpujob config set ssh_os_login false`")


def make_storage(settings: Settings, start_emulator: bool = True):
    """A google-cloud-storage client: Google (ADC), or the emulator's Cloud Storage, started
    first unless `start_emulator` is off (a read-only look, e.g. `show`, starts nothing)."""
    from google.cloud import storage  # type: ignore[attr-defined]  # it ships no type information

    if settings.cloud == "gcp":
        return storage.Client(project=settings.effective_project or None,
                              credentials=_google_credentials())
    return local_storage(start_emulator)


def local_storage(start_emulator: bool = True):
    """The local emulator's Cloud Storage, whatever cloud is configured."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage  # type: ignore[attr-defined]  # it ships no type information

    info = local_emulator(start_emulator)
    return storage.Client(project="tpujob-local", credentials=AnonymousCredentials(),
                          client_options={"api_endpoint": info["storage_endpoint"]})
