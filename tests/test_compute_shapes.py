"""What an accelerator type becomes as Compute Engine VMs (tpujob.compute_shapes)."""

import pytest

from tpujob.catalogue import GENERATIONS, accelerator
from tpujob.compute_shapes import ComputeShape, NoComputeShape, compute_shape
from tpujob.errors import EXIT_USAGE


@pytest.mark.parametrize("name, machine_type, hosts, chips_per_host, topology, boot_disk, image_family", [
    ("v6e-1", "ct6e-standard-1t", 1, 1, "1x1", "hyperdisk-balanced", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    ("v6e-4", "ct6e-standard-4t", 1, 4, "2x2", "hyperdisk-balanced", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    ("v6e-8", "ct6e-standard-8t", 1, 8, "2x4", "hyperdisk-balanced", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    ("v6e-16", "ct6e-standard-4t", 4, 4, "4x4", "hyperdisk-balanced", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    ("v6e-32", "ct6e-standard-4t", 8, 4, "4x8", "hyperdisk-balanced", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    ("v6e-256", "ct6e-standard-4t", 64, 4, "16x16", "hyperdisk-balanced", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    ("v5p-8", "ct5p-hightpu-4t", 1, 4, "2x2x1", "pd-balanced", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    ("v5p-16", "ct5p-hightpu-4t", 2, 4, "2x2x2", "pd-balanced", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    ("v5p-64", "ct5p-hightpu-4t", 8, 4, "2x4x4", "pd-balanced", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    ("v5p-128", "ct5p-hightpu-4t", 16, 4, "4x4x4", "pd-balanced", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    ("tpu7x-8", "tpu7x-standard-4t", 1, 4, "2x2x1", "hyperdisk-balanced", "ubuntu-accel-2404-amd64-tpu-tpu7x"),
    ("tpu7x-16", "tpu7x-standard-4t", 2, 4, "2x2x2", "hyperdisk-balanced", "ubuntu-accel-2404-amd64-tpu-tpu7x"),
    ("tpu7x-128", "tpu7x-standard-4t", 16, 4, "4x4x4", "hyperdisk-balanced", "ubuntu-accel-2404-amd64-tpu-tpu7x"),
])
def test_compute_shape(name, machine_type, hosts, chips_per_host, topology, boot_disk, image_family):
    """Google's tpu-machines page: v6e-8 on one ct6e-standard-8t, v6e slices of ct6e-standard-4t,
    v5p 2x2x1 = 1 VM and 2x2x2 = 2, TPU7x on tpu7x-standard-4t; Hyperdisk Balanced boot disks for
    v6e/TPU7x, Balanced PD for v5p (compute_shapes.COMPUTE_FORMS has the sources)."""
    shape = compute_shape(name)
    assert shape == ComputeShape(name, machine_type, hosts, chips_per_host, topology, boot_disk, image_family,
                                 "ubuntu-os-accelerator-images")
    acc = accelerator(name)
    assert (shape.chips, shape.hosts, shape.multi_host) == (acc.chips, acc.hosts, acc.multi_host)


@pytest.mark.parametrize("gen", ["v5p", "v6e", "tpu7x"])
def test_every_compute_topology_holds_the_slices_chips(gen):
    for n in GENERATIONS[gen].sizes:
        try:
            shape = compute_shape(f"{gen}-{n}")
        except NoComputeShape:
            assert gen == "v5p", n  # a few large v5p sizes have no known topology
            continue
        chips = 1
        for d in shape.topology.split("x"):
            chips *= int(d)
        assert chips == shape.chips == accelerator(f"{gen}-{n}").chips
        assert len(shape.topology.split("x")) == (2 if gen == "v6e" else 3)


@pytest.mark.parametrize("name, fragment", [
    ("v4-8", "Compute Engine serves TPU v5p, v6e, tpu7x only, not v4"),
    ("v5litepod-8", "not v5e"),
    ("v2-8", "not v2"),
])
def test_no_compute_shape(name, fragment):
    with pytest.raises(NoComputeShape) as info:
        compute_shape(name)
    assert fragment in str(info.value)
    assert info.value.exit_code == EXIT_USAGE
