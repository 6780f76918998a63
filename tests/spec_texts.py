"""Spec texts shared by the spec tests."""

from __future__ import annotations

import textwrap

VALID = """\
name: demo
tpu:
  accelerator: v4-8
  zone: us-central2-b
run:
  command: python train.py
"""


def dedent_spec(body: str) -> str:
    return textwrap.dedent(body).lstrip("\n")


def stored_spec_json(text: str = VALID) -> str:
    """What the store keeps for a job recorded from `text` (Job.spec_json): the resolved spec."""
    import json

    from tpujob.spec import parse, resolve

    return json.dumps(resolve(parse(text)[0], default_project="p").to_json_dict())


# For tests that record jobs straight into the store: a job of VALID.
STORED = stored_spec_json()


def resolved_spec(*, project: str = "p", zone: str = "us-central2-b", disks=(), buckets=(), run_dir=None,
                  disk_type: str = "pd-balanced", accelerator: str = "v4-8", generation: str = "v4"):
    """A ResolvedSpec as the store would hand it back, made from its parts (the storage tests
    name their disks' types and zones outright instead of resolving a spec for them)."""
    from tpujob.spec import ResolvedSpec

    return ResolvedSpec.model_validate({
        "spec": {"name": "t", "tpu": {"accelerator": accelerator, "zone": zone}, "run": {"command": "true"},
                 "disks": list(disks), "buckets": list(buckets), "run_dir": run_dir},
        "accelerator": accelerator, "generation": generation, "hosts": 1, "chips": 4, "cores": 8, "zone": zone,
        "project": project, "runtime_version": "tpu-ubuntu2204-base",
        "disk_types": {d["name"]: disk_type for d in disks}, "cost_per_hour_usd": None, "sync_path": None})
