"""networkConfig and tags on the create calls, and what the emulator answers with them: external
addresses only for workers created with enableExternalIps (tpu.v2 discovery document,
NetworkConfig and the output-only AccessConfig.externalIp)."""

from __future__ import annotations

import json
import urllib.request

from cloud_helpers import PROJECT, ZONE, wait_for_slice

from tpujob.cloud.base import SlicePhase, SliceRequest


def request(name, **kw) -> SliceRequest:
    return SliceRequest(project=PROJECT, zone=ZONE, name=name, accelerator_type="v4-16",
                        runtime_version="tpu-ubuntu2204-base", **kw)


def stored(server, kind: str, name: str) -> dict:
    """The resource as the emulator's REST API holds it (not as the client library reads it)."""
    url = f"{server.url}/v2/projects/{PROJECT}/locations/{ZONE}/{kind}/{name}"
    with urllib.request.urlopen(url) as answer:
        return json.loads(answer.read())


def test_a_node_is_created_with_external_ips_by_default(cloud, server):
    s = cloud.create_node(request("ext"))
    body = stored(server, "nodes", "ext")
    assert body["networkConfig"]["enableExternalIps"] is True
    endpoints = body["networkEndpoints"]
    assert len(endpoints) == 2
    externals = [e["accessConfig"]["externalIp"] for e in endpoints]
    assert len(set(externals)) == 2 and not set(externals) & {e["ipAddress"] for e in endpoints}
    assert [(h.ip, h.external_ip) for h in s.hosts] == [(e["ipAddress"], e["accessConfig"]["externalIp"])
                                                        for e in endpoints]
    assert [h.address(external=True) for h in s.hosts] == externals
    assert [h.address(external=False) for h in s.hosts] == [e["ipAddress"] for e in endpoints]


def test_a_node_without_external_ips_has_internal_addresses_only(cloud, server):
    s = cloud.create_node(request("int", external_ips=False))
    body = stored(server, "nodes", "int")
    assert not body.get("networkConfig", {}).get("enableExternalIps")
    assert all("accessConfig" not in e for e in body["networkEndpoints"])
    assert [h.external_ip for h in s.hosts] == [None, None]
    # gcloud's rule: no external address, so the internal one even when external was asked for.
    assert [h.address(external=True) for h in s.hosts] == [h.ip for h in s.hosts]


def test_network_subnetwork_and_tags_reach_the_node(cloud, server):
    cloud.create_node(request("net", network="projects/host-proj/global/networks/shared",
                              subnetwork="regions/us-central2/subnetworks/tpu",
                              tags=("allow-ssh", "tpu")))
    body = stored(server, "nodes", "net")
    assert body["networkConfig"] == {"enableExternalIps": True,
                                     "network": "projects/host-proj/global/networks/shared",
                                     "subnetwork": "regions/us-central2/subnetworks/tpu"}
    assert body["tags"] == ["allow-ssh", "tpu"]


def test_a_queued_resource_carries_the_network_config_to_its_node(cloud, server):
    cloud.create_queued_resource(request("qr", queued=True, tags=("tpu",)))
    node = stored(server, "queuedResources", "qr")["tpu"]["nodeSpec"][0]["node"]
    assert node["networkConfig"]["enableExternalIps"] is True and node["tags"] == ["tpu"]
    s = wait_for_slice(cloud, "qr", timeout=10)
    assert s.phase is SlicePhase.READY
    assert all(h.external_ip and h.external_ip != h.ip for h in s.hosts)

    cloud.create_queued_resource(request("qr-int", queued=True, external_ips=False))
    s = wait_for_slice(cloud, "qr-int", timeout=10)
    assert s.phase is SlicePhase.READY and [h.external_ip for h in s.hosts] == [None, None]
