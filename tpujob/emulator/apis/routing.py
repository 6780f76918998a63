"""A collection's standard methods as werkzeug rules, laid out as every Google REST API the
emulator serves lays them out (cloud.google.com/apis/design/standard_methods: List is GET on the
collection URL, Create POST on it, Get GET on the resource URL, Delete DELETE on it): the TPU
API's nodes and queued resources, Compute Engine's disks, snapshots, instances, workload
policies, instance templates and MIGs."""

from __future__ import annotations

from werkzeug.routing import Rule


def collection_rules(path: str, one: str, many: str, create: str = "insert", name: str = "name") -> list[Rule]:
    """The four rules of the collection at `path`: endpoints `{create}_{one}` and `list_{many}`
    on it, `get_{one}` and `delete_{one}` on `path/<name>` (`name`: the URL variable)."""
    return [Rule(path, methods=["POST"], endpoint=f"{create}_{one}"),
            Rule(path, methods=["GET"], endpoint=f"list_{many}"),
            Rule(f"{path}/<{name}>", methods=["GET"], endpoint=f"get_{one}"),
            Rule(f"{path}/<{name}>", methods=["DELETE"], endpoint=f"delete_{one}")]
