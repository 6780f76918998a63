"""Label rules, as Google enforces them on TPU nodes (and queued resources' nodes) and on
Compute disks and snapshots.

The rule (Resource Manager's "Requirements for labels", quoted in Google's client libraries'
docs, e.g. googleapis `retail_v2` `labels`): keys 1-63 characters, starting with a lowercase
letter; keys and values only lowercase letters, digits, underscores and dashes; values at
most 63 characters (international characters are allowed too; not modelled here: the
emulator refuses them, never friendlier than Google for tpujob's own ASCII labels). At most
64 labels a resource.
"""

from __future__ import annotations

import re

from tpujob.emulator.apis.errors import ApiError

_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
MAX_LABELS = 64


def _bad(labels: dict) -> tuple[str, str] | None:
    """The first offending (key, value), or None."""
    for key, value in (labels or {}).items():
        if not _KEY.fullmatch(str(key)) or not _VALUE.fullmatch(str(value)):
            return str(key), str(value)
    return None


def check_tpu_labels(labels: dict) -> None:
    if len(labels or {}) > MAX_LABELS:
        raise ApiError(400, f"resource labels are invalid: more than {MAX_LABELS} labels")
    _check(labels, _tpu_refusal)


def check_compute_labels(labels: dict) -> None:
    _check(labels, _compute_refusal)


def _check(labels: dict, refusal) -> None:
    bad = _bad(labels)
    if bad is not None:
        raise refusal(*bad)


def _tpu_refusal(key: str, value: str) -> ApiError:
    # Cloud TPU's wording, as gcloud printed it for a value with a dot
    # (GoogleCloudPlatform/ml-testing-accelerators#461): "INVALID_ARGUMENT: resource labels are
    # invalid: value "pt-r1.9-resnet50-mp-func-v3-32-1vm" contains invalid character '.' at
    # index 5 for key "test-name"". Other faults (a long value, a bad key) reuse its frame.
    if not _KEY.fullmatch(key):
        return ApiError(400, f'resource labels are invalid: key "{key}" does not match {_KEY.pattern}')
    index = next((i for i, c in enumerate(value) if not _VALUE.fullmatch(c)), None)
    if index is None:
        return ApiError(400, f'resource labels are invalid: value "{value}" is longer than 63 '
                             f'characters for key "{key}"')
    return ApiError(400, f'resource labels are invalid: value "{value}" contains invalid character '
                         f"'{value[index]}' at index {index} for key \"{key}\"")


def _compute_refusal(key: str, value: str) -> ApiError:
    # Compute Engine's wording (400, reason "invalid"), quoted in oap-project/cloudtik#14 and
    # googleapis/google-cloud-node-core#276: "Invalid value for field 'resource.labels': ''.
    # Label value 'head.default' violates format constraints. The value can only contain
    # lowercase letters, numeric characters, underscores and dashes. The value can be at most
    # 63 characters long. International characters are allowed." Keys: the same frame, with
    # the key rule (must start with a lowercase letter).
    if not _KEY.fullmatch(key):
        what = (f"Label key '{key}' violates format constraints. The key must start with a "
                "lowercase character, can only contain lowercase letters, numeric characters, "
                "underscores and dashes. The key can be at most 63 characters long.")
    else:
        what = (f"Label value '{value}' violates format constraints. The value can only contain "
                "lowercase letters, numeric characters, underscores and dashes. The value can be "
                "at most 63 characters long.")
    return ApiError(400, f"Invalid value for field 'resource.labels': ''. {what} International "
                         "characters are allowed.", status="invalid")
