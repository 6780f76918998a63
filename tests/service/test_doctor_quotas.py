"""`tpujob doctor`'s `compute quotas` check, through the real CLI against the shared emulator:
the metric names come from what regions.get lists (the emulator's own, settable), never from a
list of tpujob's."""

from __future__ import annotations

import json
import uuid

import pytest

from tpujob.service import cron

SPEC = """\
name: {name}
tpu: {{accelerator: v6e-8, zone: {zone}, api: {api}}}
run:
  command: "sleep 600"
"""


@pytest.fixture
def project(monkeypatch, local_cloud):
    """A project of the test's own: the quota lists it sets touch no other test."""
    monkeypatch.setattr(cron, "installed", lambda: None)
    name = f"dq-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("TPUJOB_PROJECT", name)
    return name


def record(spec_file, name="q", zone="us-east5-b", api="compute"):
    """A PENDING job on record (nothing created: no sweep runs)."""
    from tpujob.service import jobs
    from tpujob.service.context import Context

    return jobs.record(Context.load(), str(spec_file(SPEC.format(name=name, zone=zone, api=api))))[0]


def quotas(cli):
    result = cli("doctor", "--json")
    assert result.out, result.err
    return result, {c["name"]: c for c in json.loads(result.out)["cloud"]}["compute quotas"]


def test_without_a_compute_engine_job_no_quota_is_read(cli, project, spec_file, local_cloud):
    record(spec_file, api="tpu-vm")
    local_cloud.quotas(project, "us-east5", [{"metric": "TPU_X", "limit": 0}])  # would warn if read
    _, check = quotas(cli)
    assert check["status"] == "ok" and "no active Compute Engine job" in check["detail"], check


def test_the_tpu_quotas_the_region_lists_are_reported_with_usage_and_limit(cli, project, spec_file, local_cloud):
    record(spec_file)
    # A name no list of tpujob's holds: only what Google (here the emulator) lists is read.
    local_cloud.quotas(project, "us-east5", [{"metric": "CPUS", "limit": 24, "usage": 0},
                                             {"metric": "ANY_TPU_NAME_GOOGLE_SENDS", "limit": 32, "usage": 8}])
    local_cloud.quotas(project, None, [{"metric": "GPUS_ALL_REGIONS", "limit": 4, "usage": 1}])
    result, check = quotas(cli)
    assert check["status"] == "ok", check
    assert check["detail"] == "usage/limit: ANY_TPU_NAME_GOOGLE_SENDS 8/32 in us-east5; GPUS_ALL_REGIONS 1/4"
    assert "CPUS" not in check["detail"]


def test_one_tpu_metric_at_0_among_others_is_reported_not_warned(cli, project, spec_file, local_cloud):
    # A real region lists a metric per family and model, most at 0 for a given project: which
    # one a job draws on is not known by name, so only a region with every one at 0 warns.
    record(spec_file)
    local_cloud.quotas(project, "us-east5", [{"metric": "TPU_A", "limit": 0},
                                             {"metric": "PREEMPTIBLE_TPU_B", "limit": 16, "usage": 4}])
    _, check = quotas(cli)
    assert check["status"] == "ok", check
    assert "TPU_A 0/0 in us-east5; PREEMPTIBLE_TPU_B 4/16 in us-east5" in check["detail"]


@pytest.mark.parametrize("region_quotas, project_quotas, warning", [
    ([{"metric": "PREEMPTIBLE_TPU_X", "limit": 0, "usage": 0}], [{"metric": "GPUS_ALL_REGIONS", "limit": 8}],
     "every TPU quota of project {project} in us-east5 has a limit of 0"),
    ([{"metric": "TPU_X", "limit": 16, "usage": 16}], [{"metric": "GPUS_ALL_REGIONS", "limit": 8}],
     "TPU_X is used up in us-east5 (16/16) while a job waits there"),
    ([{"metric": "TPU_X", "limit": 16, "usage": 0}], [{"metric": "GPUS_ALL_REGIONS", "limit": 0}],
     "GPUS_ALL_REGIONS of project {project} has a limit of 0"),
    ([{"metric": "CPUS", "limit": 24, "usage": 0}], [{"metric": "GPUS_ALL_REGIONS", "limit": 8}],
     "no TPU quota is visible for project {project} in us-east5"),
])
def test_a_quota_that_stops_a_waiting_job_is_a_warning_with_the_quota_page(
        cli, project, spec_file, local_cloud, region_quotas, project_quotas, warning):
    record(spec_file)
    local_cloud.quotas(project, "us-east5", region_quotas)
    local_cloud.quotas(project, None, project_quotas)
    result, check = quotas(cli)
    assert "compute quotas" not in result.err  # a warning, not a failed check (exit 6)
    assert check["status"] == "warning", check
    assert check["detail"].startswith(warning.format(project=project)), check
    assert check["fix"] == "request quota at https://console.cloud.google.com/iam-admin/quotas"


def test_the_configured_zone_region_is_read_too(cli, project, spec_file, local_cloud, monkeypatch):
    record(spec_file)
    monkeypatch.setenv("TPUJOB_ZONE", "us-central1-c")
    local_cloud.quotas(project, "us-central1", [{"metric": "CPUS", "limit": 24}])
    _, check = quotas(cli)
    assert check["status"] == "warning"
    assert f"no TPU quota is visible for project {project} in us-central1" in check["detail"], check
    assert "in us-east5" in check["detail"]  # the job's region, with the emulator's default list


def test_the_emulators_default_lists_pass_and_name_every_tpu_metric(cli, project, spec_file):
    from tpujob.emulator.apis.compute.quotas import INVENTED_TPU_METRICS

    record(spec_file)
    _, check = quotas(cli)
    assert check["status"] == "ok", check
    for metric, limit in INVENTED_TPU_METRICS.items():
        assert f"{metric} 0/{limit:g} in us-east5" in check["detail"]
    assert check["detail"].endswith("; GPUS_ALL_REGIONS 0/16")


def test_regions_get_through_googles_client_keeps_any_metric_name(project, local_cloud, shared_emulator):
    """Quota.metric is a string field in google-cloud-compute: a name its Quota.Metric enum lacks
    reaches the caller as sent; a name that is no region's is a 404."""
    from tpujob.cloud.disks import GcpCompute, QuotaInfo
    from tpujob.errors import NotFoundError

    compute = GcpCompute.for_emulator(shared_emulator["compute_endpoint"])
    local_cloud.quotas(project, "europe-west4", [{"metric": "NOT_IN_THE_ENUM_TPU", "limit": 3, "usage": 1}])
    assert compute.quotas(project, "europe-west4") == [QuotaInfo("NOT_IN_THE_ENUM_TPU", 3.0, 1.0)]
    local_cloud.quotas(project, "europe-west4", None)  # back to the defaults
    assert "CPUS" in {q.metric for q in compute.quotas(project, "europe-west4")}
    with pytest.raises(NotFoundError):
        compute.quotas(project, "europe-west4-a")  # a zone, not a region
