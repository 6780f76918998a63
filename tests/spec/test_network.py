"""`tpu.network`: external IPs (the default), network, subnetwork and tags, validated like the
rest of the spec (exit 2, the field and its line, nothing written) and printed by `validate`."""

from __future__ import annotations

import pytest
from spec_texts import dedent_spec as _spec

pytestmark = pytest.mark.usefixtures("no_emulator_left")


def network_spec(network: str, fallback: str = "[]") -> str:
    """A spec whose tpu.network holds `network` (lines indented by 4); it starts on line 6."""
    return ("name: demo\ntpu:\n  accelerator: v4-8\n  zone: us-central2-b\n"
            f"  fallback: {fallback}\n  network:\n{network}\nrun: {{command: x}}\n")


REFUSALS = [
    # (id, the lines under `network:`, field, line, fragment)
    ("unknown-key", "    external_ip: false", "tpu.network.external_ip", 7, "did you mean 'external_ips'?"),
    ("external-ips-not-a-bool", "    external_ips: 'no'", "tpu.network.external_ips", 7, "valid boolean"),
    ("network-uppercase", "    network: My_Net", "tpu.network.network", 7, "is not a network"),
    ("network-path-of-a-subnetwork", "    network: regions/us-central2/subnetworks/a",
     "tpu.network.network", 7, "is not a network"),
    ("subnetwork-bad-path", "    subnetwork: projects/p-1234/subnetworks/a",
     "tpu.network.subnetwork", 7, "is not a subnetwork"),
    ("subnetwork-other-region", "    subnetwork: regions/us-east1/subnetworks/tpu",
     "tpu.network.subnetwork", 7, "is in region us-east1, but the job may run in zone us-central2-b"),
    ("tag-too-long", "    tags: [" + "a" * 64 + "]", "tpu.network.tags[0]", 7, "is not a network tag"),
    ("tag-trailing-hyphen", "    tags:\n      - ok\n      - bad-",
     "tpu.network.tags[1]", 9, "is not a network tag"),
    ("tag-twice", "    tags: [ssh, ssh]", "tpu.network.tags[1]", 7, "listed twice"),
]


@pytest.mark.parametrize("lines, field, line, fragment", [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS])
def test_refusal(cli, spec_file, stored_jobs, lines, field, line, fragment):
    result = cli("validate", spec_file(network_spec(lines)))
    assert result.code == 2, result
    error = result.error_line
    assert error.startswith(f"error: {field} (line {line}): "), error
    assert fragment in error, error
    assert stored_jobs() == 0 and result.out == ""


def test_a_fallback_zone_in_another_region_refuses_a_regional_subnetwork(cli, spec_file):
    text = network_spec("    subnetwork: projects/my-proj/regions/us-central2/subnetworks/tpu",
                        fallback="[{zone: us-east1-d}]")
    result = cli("validate", spec_file(text))
    assert result.code == 2
    assert "the job may run in zone us-east1-d" in result.error_line


@pytest.mark.parametrize("network, subnetwork", [
    ("default", "default"),
    ("projects/host-project/global/networks/shared", "projects/host-project/regions/us-central2/subnetworks/tpu"),
    ("global/networks/tpu-net", "regions/us-central2/subnetworks/tpu"),
    ("https://www.googleapis.com/compute/v1/projects/my-proj/global/networks/n",
     "https://www.googleapis.com/compute/v1/projects/my-proj/regions/us-central2/subnetworks/s"),
])
def test_names_and_resource_paths_are_accepted_as_gcloud_takes_them(cli, spec_file, network, subnetwork):
    text = network_spec(f"    network: {network}\n    subnetwork: {subnetwork}\n"
                        "    tags: [allow-ssh, tpu-1]")
    result = cli("validate", spec_file(text))
    assert result.code == 0, result.err
    assert f"network {network}, subnetwork {subnetwork}, tags allow-ssh, tpu-1" in result.out


def test_validate_prints_external_ips_by_default(cli, spec_file):
    result = cli("validate", spec_file(_spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        """)))
    assert result.code == 0, result.err
    line = next(x for x in result.out.splitlines() if x.startswith("network:"))
    assert line.split(None, 1)[1] == "external IPs (SSH over them); network default, subnetwork default"
    json_out = cli("validate", "--json", spec_file(_spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        """)))
    import json

    assert json.loads(json_out.out)["spec"]["tpu"]["network"] == {
        "external_ips": True, "network": None, "subnetwork": None, "tags": []}


def test_validate_says_internal_ips_need_the_vpc(cli, spec_file):
    result = cli("validate", spec_file(network_spec("    external_ips: false")))
    assert result.code == 0, result.err
    assert "internal IPs only (tpujob must run inside the VPC)" in result.out


def test_a_compute_engine_slice_without_external_ips_is_told_what_its_network_needs(cli, spec_file):
    # ip-addresses: "If no external IP address is configured on the instance, Cloud NAT can be used";
    # Subnetwork.privateIpGoogleAccess for Google APIs. Advice on stderr, before the first setup fails.
    spec = ("name: demo\ntpu:\n  accelerator: tpu7x-8\n  zone: us-central1-c\n  network:\n    external_ips: false\n"
            "run: {command: x}\n")
    result = cli("validate", spec_file(spec))
    assert result.code == 0, result.err
    assert "need Cloud NAT" not in result.out and "Cloud NAT in the subnet's region" in result.err
    assert "Private Google Access" in result.err
    tpu_api = cli("validate", spec_file(network_spec("    external_ips: false")))
    assert "Cloud NAT" not in tpu_api.err  # the TPU API path: its own network config, not this advice
