"""Which fields `nodes.patch` (UpdateNode) changes, by API version, and how.

Sources:
- tpu.v2.json and tpu.v2alpha1.json (revision 20261001, as google-api-python-client 2.202 ships
  them), `projects.locations.nodes.patch`, parameter `updateMask`: "Required. Mask of fields
  from Node to update. Supported fields: [description, tags, labels, metadata,
  network_config.enable_external_ips]." No `data_disks`.
- gcloud's `alpha compute tpus tpu-vm attach-disk` (google-cloud-sdk
  surface/compute/tpus/tpu_vm/attach_disk.py, ALPHA track only) appends to the node's
  `data_disks` and patches it with `updateMask=data_disks` on v2alpha1: the one documented way
  to attach a disk to an existing node, so v2alpha1 takes `data_disks` too. Whether v2 does is
  unknown (no page or payload says): the emulator follows the discovery document and refuses.
- No TPU payload for a mask path outside the list was found; the refusal is worded after Google's
  own for another API's UpdateCluster, 400 INVALID_ARGUMENT "FieldMask path 'config' must be one
  of the following: [config.worker_config.num_instances, ..., labels]." (Dataproc, quoted in
  pulumi/pulumi-google-native#840).
"""

from __future__ import annotations

from tpujob.emulator.apis.errors import ApiError

# Mask paths as the discovery document spells them -> the Node JSON field each names.
DOCUMENTED = {"description": "description", "tags": "tags", "labels": "labels",
              "metadata": "metadata", "network_config.enable_external_ips": "networkConfig.enableExternalIps"}
DATA_DISKS = "data_disks"
ALLOWED = {"v2": tuple(DOCUMENTED), "v2alpha1": (*DOCUMENTED, DATA_DISKS)}


def _snake(path: str) -> str:
    """A mask path as the proto names it: the REST clients send FieldMask JSON in lowerCamelCase
    (`dataDisks`, `networkConfig.enableExternalIps`)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in path)


def mask_paths(mask: str, api_version: str) -> list[str]:
    """The mask's paths (snake_case), each one the version supports; ApiError 400 otherwise."""
    paths = [_snake(p.strip()) for p in mask.split(",") if p.strip()]
    if not paths:
        raise ApiError(400, "Request must specify update_mask with at least one path.")
    allowed = ALLOWED[api_version]
    for path in paths:
        if path not in allowed:
            raise ApiError(400, f"FieldMask path '{path}' must be one of the following: "
                                f"[{', '.join(allowed)}].")
    return paths


def apply_documented(node_body: dict, paths: list[str], body: dict) -> None:
    """Set each documented field the mask names from the request's node (absent: cleared)."""
    for path in paths:
        if path == DATA_DISKS:
            continue
        *parents, leaf = DOCUMENTED[path].split(".")
        source, target = body, node_body
        for key in parents:
            source = source.get(key, {})
            target = target.setdefault(key, {})
        if leaf in source:
            target[leaf] = source[leaf]
        else:
            target.pop(leaf, None)
