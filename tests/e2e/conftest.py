"""Fixtures of the end-to-end tests against the shared emulator (tests/conftest.py starts it):
a project of the test's own, a Context whose jobs are deleted after, the run dirs' bucket, and
Google's replayed answers armed through `tpujob emulator fail-next`."""

from __future__ import annotations

import uuid

import pytest
from reconcile_helpers import local_cloud_faults_off, named_bucket, payload


@pytest.fixture
def project(monkeypatch, local_cloud):
    name = f"rq-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("TPUJOB_PROJECT", name)
    return name


@pytest.fixture
def bucket(local_cloud):
    """gs://rundir-tests, where the run-dir tests' jobs write, each under a prefix of its own."""
    return named_bucket("rundir-tests")


@pytest.fixture
def ctx(project):
    """A Context on this test's store; every job it recorded is deleted (with its slices) after."""
    from tpujob.service import jobs
    from tpujob.service.context import Context

    context = Context.load()
    yield context
    local_cloud_faults_off(context)
    for job in context.store.list_jobs(include_ended=True):
        if job.state != "DELETED":
            try:
                jobs.delete(context, str(job.id))
            except Exception:  # noqa: BLE001 - cleaning up after a failed test must go on
                pass


@pytest.fixture
def replay(cli, local_cloud):
    """`tpujob emulator fail-next` with a fixture's answer; faults left pending are dropped after."""

    def arm(name: str, times: int = 1, method: str | None = None, in_operation: bool | None = None) -> dict:
        """`method`/`in_operation`: replay the answer on another call (a queued resource's create,
        whose --in-operation ends the queued resource FAILED with it in failedData)."""
        answer = payload(name)
        args = ["emulator", "fail-next", method or answer["method"], "--status", answer["status"],
                "--message", answer["message"], "--grpc-status", answer["grpc_status"],
                "--times", times]
        if answer["reason"]:
            args += ["--reason", answer["reason"]]
        if answer.get("domain"):
            args += ["--domain", answer["domain"]]
        for key, value in answer.get("metadata", {}).items():
            args += ["--metadata", f"{key}={value}"]
        for violation in answer.get("quota_violations", []):
            args += ["--quota-violation", f"{violation['subject']}={violation['description']}"]
        if answer["in_operation"] if in_operation is None else in_operation:
            args.append("--in-operation")
        result = cli(*args)
        assert result.code == 0, result.err
        return answer

    yield arm
    local_cloud.clear_fail_next()
