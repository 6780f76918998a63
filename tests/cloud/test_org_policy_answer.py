"""An organisation policy's refusal, as Google answered it (tests/fixtures/gcp_errors/
org_policy_violated.json): a refusal for good, not an error the sweep retries every time."""

from __future__ import annotations

import json
from pathlib import Path

from google.api_core import exceptions as gexc

from tpujob.cloud.api_calls import classify, retryable
from tpujob.errors import CloudRefused

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "gcp_errors" / "org_policy_violated.json"


def test_a_constraint_violated_is_refused_for_good_with_googles_words():
    answer = json.loads(FIXTURE.read_text())
    assert answer["source"] and answer["status"] == 412
    err = gexc.from_http_status(answer["status"], answer["message"],
                                errors=[{"message": answer["message"], "domain": "global",
                                         "reason": answer["reason"]}])
    typed = classify("creating disk d", err, "compute.googleapis.com")
    assert type(typed) is CloudRefused
    assert "Constraint constraints/compute.requireShieldedVm violated for project" in str(typed)
    assert not retryable(err)
