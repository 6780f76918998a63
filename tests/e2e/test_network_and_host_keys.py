"""External IPs and host keys end to end: which address the sweep's SSH reaches each host on,
and what it does when a node publishes its host keys late, never, or (trusted on first use)
presents another key later. Real client, real SSH, each test in a project of its own."""

from __future__ import annotations

import json
import uuid

import pytest
from reconcile_helpers import ZONE, api_list, node_ref, reconciler, running, sweep_until

pytestmark = pytest.mark.slow

SPEC = """\
name: {name}
tpu:
  accelerator: v4-16
  zone: {zone}
  queued: false
  network: {network}
requeue: {{backoff_seconds: 0, max_failures: 0, setup_timeout_seconds: {setup_timeout}}}
run:
  command: sleep 600
"""


def record(ctx, tmp_path, name="net", network="{}", setup_timeout=900):
    from tpujob.service import jobs

    path = tmp_path / f"{name}-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(SPEC.format(name=name, zone=ZONE, network=network, setup_timeout=setup_timeout))
    job, _ = jobs.record(ctx, str(path))
    return job


def node_body(client, project, name) -> dict:
    return next(n for n in api_list(client, project, ZONE, "nodes") if n["name"].endswith(f"/{name}"))


def events(ctx, job_id) -> list[str]:
    return [f"{e.kind}: {e.message}" for e in ctx.store.events(job_id)]


def test_a_job_reaches_its_hosts_on_their_external_addresses(cli, ctx, local_cloud, project, tmp_path):
    job = record(ctx, tmp_path)
    sweep_until(ctx, job.id, running)
    name = ctx.store.current_attempt(job.id).slice_name
    node = node_body(local_cloud, project, name)
    assert node["networkConfig"]["enableExternalIps"] is True
    hosts = local_cloud.hosts(node_ref(project, ZONE, name))
    assert [e["accessConfig"]["externalIp"] for e in node["networkEndpoints"]] == [h["externalIp"] for h in hosts]
    for h in hosts:  # setup, launch and status: all over the external address
        assert h["sshConnections"][h["externalIp"]] > 0 and h["sshConnections"][h["ip"]] == 0, h
    shown = json.loads(cli("show", str(job.id), "--json").out)
    assert [s["ip"] for s in shown["hosts"]] == [h["externalIp"] for h in hosts]
    assert shown["host0_ip"] == hosts[0]["externalIp"]


def test_a_job_with_internal_ips_only_connects_over_the_internal_address(cli, ctx, local_cloud, project, tmp_path):
    job = record(ctx, tmp_path, network="{external_ips: false, tags: [tpu]}")
    sweep_until(ctx, job.id, running)
    name = ctx.store.current_attempt(job.id).slice_name
    node = node_body(local_cloud, project, name)
    assert not node["networkConfig"].get("enableExternalIps") and node["tags"] == ["tpu"]
    assert all("accessConfig" not in e for e in node["networkEndpoints"])
    hosts = local_cloud.hosts(node_ref(project, ZONE, name))
    for h in hosts:
        assert h["externalIp"] is None and list(h["sshConnections"]) == [h["ip"]] and h["sshConnections"][h["ip"]] > 0
    shown = json.loads(cli("show", str(job.id), "--json").out)
    assert [s["ip"] for s in shown["hosts"]] == [h["ip"] for h in hosts]
    assert shown["host0_ip"] == hosts[0]["ip"]


def test_host_keys_published_late_are_waited_for(ctx, local_cloud, project, tmp_path):
    local_cloud.set_faults(hostkeys_delay=1.5)
    job = record(ctx, tmp_path)
    job = sweep_until(ctx, job.id, running)
    assert any("waiting for the SSH host keys of hosts 0, 1 in guest attributes" in e for e in events(ctx, job.id))
    attempt = ctx.store.current_attempt(job.id)
    hosts = local_cloud.hosts(node_ref(project, ZONE, attempt.slice_name))
    assert json.loads(attempt.host_keys) == {str(h["index"]): [h["hostKey"]] for h in hosts}


def test_host_keys_never_published_fail_the_attempt_after_the_setup_timeout(ctx, local_cloud, project, tmp_path):
    local_cloud.set_faults(hostkeys_delay=-1)
    job = record(ctx, tmp_path, setup_timeout=1)
    job = sweep_until(ctx, job.id, lambda j: j.ended_at is not None)
    assert (job.state, job.end_reason) == ("FAILED", "setup_failed")
    # setup_timeout(2 hosts) = 1 s * (1 + 2/32)
    assert any("setup failed: host 0 published no SSH host key in guest attributes within 1s" in e
               for e in events(ctx, job.id)), events(ctx, job.id)
    (attempt,) = ctx.store.attempts(job.id)
    assert attempt.end_reason == "setup_failed" and attempt.host_keys is None
    assert api_list(local_cloud, project, ZONE, "nodes") == []  # the failed slice is deleted


def test_accept_new_trusts_the_first_key_then_holds_the_hosts_to_it(cli, ctx, local_cloud, project, tmp_path):
    local_cloud.set_faults(hostkeys_delay=-1)
    assert cli("config", "set", "ssh_host_keys", "accept-new").code == 0
    from tpujob.service.context import Context

    ctx = Context.load()  # the setting as the sweep reads it
    job = record(ctx, tmp_path)
    sweep_until(ctx, job.id, running)
    attempt = ctx.store.current_attempt(job.id)
    hosts = local_cloud.hosts(node_ref(project, ZONE, attempt.slice_name))
    assert json.loads(attempt.host_keys) == {str(h["index"]): [h["hostKey"]] for h in hosts}
    assert sum("accepted ssh-ed25519 SHA256:" in e and "on first use" in e for e in events(ctx, job.id)) == 2

    # Host 1 now shows another key than the one pinned (as a host replaced under the same
    # address would): refused, as a key that differs from a published one is.
    pinned = json.loads(attempt.host_keys)
    pinned["1"] = [hosts[0]["hostKey"]]
    ctx.store.record_host_keys(job.id, attempt.number, json.dumps(pinned))
    shown = json.loads(cli("show", str(job.id), "--json").out)["hosts"]
    assert shown[0]["program"] == "running"
    assert shown[1]["program"] == "unreachable" and "host key mismatch" in shown[1]["error"], shown[1]
    reconciler(ctx).sweep([job.id])
    assert json.loads(ctx.store.current_attempt(job.id).host_keys)["1"] == [hosts[0]["hostKey"]]  # not re-pinned
