"""Real answers Google gave, replayed through `tpujob emulator fail-next` against a job's slice
create (tests/fixtures/gcp_errors/*.json, each with its source): the job's state, end reason and
events as `tpujob show --json` reports them after `tpujob requeue`, and what `tpujob create`
exits with when the fix is the user's (a role, an API, a login)."""

from __future__ import annotations

import pytest
from reconcile_helpers import messages, record, requeue_and_show, spec_text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

@pytest.mark.parametrize("name, end_reason, said", [
    # A spent resource quota ends the job: no retry brings quota back.
    ("quota_limit_region", "no_capacity", "quota exhausted: creating node .* Limit: 0 in region us-east5"),
    ("quota_failure_exhausted", "no_capacity", "quota exhausted: .*Limit 20800 in region us-central2"),
    # The fix is the user's: the event names the permission and a role, or the API to enable.
    ("permission_denied", "user_error", "refused: .*tpu.nodes.create.*grant the account a role holding "
                                        r"it \(e.g. roles/tpu.admin\)"),
    ("api_disabled", "user_error", "refused: .*enable the API: gcloud services enable tpu.googleapis.com"),
    # Placement refusals (no fallback in this spec): FAILED, the zone named.
    ("accelerator_not_in_zone", "user_error", "this placement is refused: .*zonal accelerator configurations"),
    ("location_not_found", "user_error", "this placement is refused: .*cannot use location us-east1-d"),
])
def test_refusals_end_the_job_once_with_the_reason(cli, ctx, replay, tmp_path, name, end_reason, said):
    import re

    job = record(ctx, tmp_path, name=name.replace("_", "-"))
    replay(name)
    shown = requeue_and_show(cli, job.id)
    assert (shown["state"], shown["end_reason"]) == ("FAILED", end_reason)
    # A placement the zone does not offer ends its attempt `unavailable` (a fallback could take
    # over); every other refusal `refused`.
    placement = name in ("accelerator_not_in_zone", "location_not_found")
    assert [a["end_reason"] for a in shown["attempts"]] == ["unavailable" if placement else "refused"]
    assert re.search(said, messages(shown)), messages(shown)
    again = requeue_and_show(cli, job.id)  # ended once: a later sweep does not touch it
    assert len(again["events"]) == len(shown["events"]) and again["attempt"] == 1


@pytest.mark.parametrize("name, said", [
    ("stockout_in_operation", 'no more capacity in the zone "europe-west4-a"'),
    ("internal_on_create", r"An internal error has occurred \(treated as a capacity miss\)"),
])
def test_capacity_misses_back_off_and_try_again(cli, ctx, replay, tmp_path, name, said):
    import re

    job = record(ctx, tmp_path, name=name.replace("_", "-"))
    replay(name, times=2)  # the attempt, and the next one its miss starts (backoff 0)
    shown = requeue_and_show(cli, job.id)
    # The sweep followed its create to the miss and asked for the next; that one's end is the
    # next sweep's to see.
    assert (shown["state"], shown["end_reason"]) == ("PROVISIONING", None)
    assert [a["end_reason"] for a in shown["attempts"]] == ["no_capacity", None]
    shown = requeue_and_show(cli, job.id)
    assert shown["end_reason"] is None
    assert [a["end_reason"] for a in shown["attempts"]][:2] == ["no_capacity", "no_capacity"]
    stockouts = [e["message"] for e in shown["events"] if e["kind"] == "stockout"]
    assert len(stockouts) == 2 and all(re.search(said, m) for m in stockouts)
    assert "capacity miss 2 of 48 allowed" in messages(shown)


def test_a_401_keeps_the_job_and_the_next_sweep_creates_the_slice(cli, ctx, replay, tmp_path):
    job = record(ctx, tmp_path, name="unauth")
    replay("unauthenticated")
    shown = requeue_and_show(cli, job.id)
    assert (shown["state"], shown["end_reason"]) == ("PROVISIONING", None)
    assert "will retry once the credentials work: creating node" in messages(shown)
    assert "gcloud auth application-default login" in messages(shown)
    recovered = requeue_and_show(cli, job.id)  # the credentials work again
    assert recovered["attempt"] == 1 and "requested tpujob-" in messages(recovered)


@pytest.mark.parametrize("name, fix", [
    ("permission_denied", "roles/tpu.admin"),
    ("api_disabled", "gcloud services enable tpu.googleapis.com"),
    ("unauthenticated", "gcloud auth application-default login"),
])
def test_create_exits_6_with_the_fix(cli, ctx, replay, spec_file, name, fix):
    replay(name)
    result = cli("create", spec_file(spec_text(name.replace("_", "-"))), "--json")
    assert result.code == 6
    assert fix in result.error_line
    (job,) = ctx.store.list_jobs(include_ended=True)
    expected = ("PROVISIONING", None) if name == "unauthenticated" else ("FAILED", "user_error")
    assert (job.state, job.end_reason) == expected
