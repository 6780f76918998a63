"""How tpujob calls Google's APIs (TPU v2, Compute v1, OS Login, Cloud Storage): one classifier
of their error answers, the retried calls it guards, and the settings of a client of the local
emulator.

Every error a client library raises, or a long-running operation ends with, goes through
`classify`: the first row of the table (tpujob.cloud.error_rules.RULES) that matches decides the
typed error and whether the call is retried; `invoke` runs a call under api_core's Retry with
that answer. Import lazily: this pulls in google-api-core.
"""

from __future__ import annotations

from typing import Any, Callable

import requests
from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.auth import exceptions as auth_exc
from google.auth.credentials import AnonymousCredentials

from tpujob.cloud.error_rules import RULES, Answer, Rule
from tpujob.errors import AUTH_HINT, AuthError, CloudError, TpujobError

# The network between us and the API (a dropped connection, a read timeout) or the token
# endpoint being unreachable: the same remedy as a 503.
NETWORK = (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
           auth_exc.TransportError)


def status_error(status: Any) -> gexc.GoogleAPICallError:
    """The exception for a google.rpc.Status that an operation (`error`) or a queued resource
    (`state.failedData.error`) ended with, its details unpacked as api_core does for gRPC
    (google.api_core.exceptions._parse_grpc_error_details): ErrorInfo gives reason, domain and
    metadata, QuotaFailure its violations."""
    from google.rpc import error_details_pb2

    details, info = [], None
    for detail in status.details:
        for kind in (error_details_pb2.ErrorInfo, error_details_pb2.QuotaFailure):
            if detail.Is(kind.DESCRIPTOR):
                unpacked = kind()
                detail.Unpack(unpacked)
                details.append(unpacked)
                info = unpacked if kind is error_details_pb2.ErrorInfo else info
                break
        else:
            details.append(detail)
    error: gexc.GoogleAPICallError = gexc.from_grpc_status(status.code, status.message, details=details,
                                                            error_info=info)
    return error


def rule_for(answer: Answer) -> Rule | None:
    return next((rule for rule in RULES if rule.matches(answer)), None)


def classify(what: str, err: gexc.GoogleAPICallError, service: str = "tpu.googleapis.com",
             create_operation: bool = False) -> TpujobError:
    """The typed error for one answer (a retried kind, once given up on, is a CloudError)."""
    answer = Answer(err, what, service, create_operation)
    rule = rule_for(answer)
    return rule.typed(answer) if rule is not None and rule.typed is not None \
        else CloudError(answer.message)


def retryable(err: Exception) -> bool:
    """Whether api_core's Retry tries the call again: network trouble and the transient rows."""
    if isinstance(err, NETWORK):
        return True
    if not isinstance(err, gexc.GoogleAPICallError):
        return False
    rule = rule_for(Answer(err, "", ""))
    return rule is not None and rule.typed is None


def describe(err: BaseException | None) -> str:
    """One line for an error that is not an API answer (network, a retry given up)."""
    if isinstance(err, gexc.GoogleAPICallError):
        return f"{type(err).__name__}: {err.message}"
    if err is not None and not str(err):
        return type(err).__name__
    return f"{type(err).__name__}: {err}" if isinstance(err, NETWORK) else str(err)


def invoke(retry: gretry.Retry, what: str, attempt: Callable[[], Any],
           service: str = "tpu.googleapis.com") -> Any:
    """Run `attempt` under `retry`; every failure leaves as a typed error."""
    try:
        return retry(attempt)()
    except gexc.GoogleAPICallError as err:
        raise classify(what, err, service) from err
    except gexc.RetryError as err:
        raise CloudError(f"{what}: gave up after retries: {describe(err.cause)}") from err
    except NETWORK as err:  # only when a retry deadline of 0 let one through
        raise CloudError(f"{what}: {describe(err)}") from err
    except (auth_exc.RefreshError, auth_exc.DefaultCredentialsError) as err:
        raise credentials_unusable(what, err) from err


def credentials_unusable(what: str, err: Exception) -> AuthError:
    """ADC that cannot give a token (expired or revoked: RefreshError; none: DefaultCredentialsError)
    as one line with the fix. A RefreshError's first argument is its reason; the second, the
    token endpoint's whole answer, is left out."""
    reason = err.args[0] if err.args and isinstance(err.args[0], str) else describe(err)
    return AuthError(f"{what}: Google credentials not usable ({reason}); {AUTH_HINT}")


def new_retry(initial: float, maximum: float, deadline: float) -> gretry.Retry:
    return gretry.Retry(predicate=retryable, initial=initial, maximum=maximum, multiplier=2.0,
                        timeout=deadline)


def emulator_settings(polls: bool = True, **given: Any) -> dict[str, Any]:
    """The keyword arguments of a client of the local emulator, under those `given`: anonymous
    credentials (it checks none), and retries and operation polls a few hundredths of a second
    apart, where Google's clients wait seconds: the emulator answers at once, on this machine, so
    backoff meant for a remote API would only slow the demo and the tests. `polls`: the client
    waits on long-running operations (it takes a `poll_interval`)."""
    settings: dict[str, Any] = {"credentials": AnonymousCredentials(), "retry_initial": 0.05,
                                "retry_maximum": 0.5}
    if polls:
        settings["poll_interval"] = 0.05
    return {**settings, **given}
