"""Who submits a job, and from which node: every job records both (`list`'s OWNER, `show`, the
dashboard), and `cancel`/`delete` of another user's job asks for --force. A lab's convention
against mistakes, NOT a security boundary: anyone who can write the store (or set `user`) can act
as anyone.

The user is the `user` setting, else (on `cloud: gcp`) the account Application Default
Credentials carry, else `$USER@host`. The ADC account is read from the credentials file
google-auth would load, without importing google-auth and without the network: `list --mine`
resolves the same user as `create` and stays light (tpujob/cli imports no Google library for
`list`), and no token is refreshed just to learn a name. Credentials from the metadata server
(on a Google VM) name their account only after a network call: those resolve to `$USER@host`.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
from pathlib import Path

from tpujob.settings import Settings


def this_node() -> str:
    """The login node a job is submitted from, as it names itself."""
    return socket.gethostname()


def current_user(settings: Settings) -> str:
    """The user this node acts as: `user`, else ADC's account on gcp, else $USER@host."""
    if settings.user:
        return settings.user
    if settings.cloud == "gcp":
        account = adc_account()
        if account:
            return account
    return f"{getpass.getuser()}@{this_node()}"


def is_others(owner: str | None, settings: Settings) -> bool:
    """A job someone else submitted. A job recorded before owners were (None) is nobody's."""
    return owner is not None and owner != current_user(settings)


def adc_account() -> str:
    """The account of the Application Default Credentials file, "" when there is none or it
    names none. The file is the one google.auth.default() reads first, in its order
    (google/auth/_default.py, `_get_explicit_environ_credentials` then
    `_get_gcloud_sdk_credentials`): $GOOGLE_APPLICATION_CREDENTIALS, else gcloud's
    application_default_credentials.json in $CLOUDSDK_CONFIG or ~/.config/gcloud
    (google/auth/_cloud_sdk.py, `get_application_default_credentials_path`)."""
    path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or str(
        Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud")
        / "application_default_credentials.json")
    try:
        info = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return ""
    return account_of(info) if isinstance(info, dict) else ""


def account_of(info: dict) -> str:
    """The account an ADC file's JSON names, by its `type` (google/auth/_default.py's
    _VALID_TYPES): a service account key's `client_email` (what
    google.oauth2.service_account.Credentials.service_account_email returns); a gcloud user
    login's `account`, which google.oauth2.credentials.Credentials.from_authorized_user_info
    reads as optional ("may not exist": older gcloud writes none); the target of an impersonated
    or workload-identity file's `service_account_impersonation_url` (.../serviceAccounts/
    EMAIL:generateAccessToken, as google/auth/external_account.py's service_account_email
    parses it, and google/auth/impersonated_credentials.py's from_impersonated_service_account_info
    reads it)."""
    kind = info.get("type")
    if kind == "service_account":
        return str(info.get("client_email") or "")
    if kind == "authorized_user":
        return str(info.get("account") or "")
    if kind in ("impersonated_service_account", "external_account"):
        url = str(info.get("service_account_impersonation_url") or "")
        start, end = url.rfind("/") + 1, url.find(":generateAccessToken")
        return url[start:end] if start and end > start else ""
    return ""
