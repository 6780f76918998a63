"""`tpujob init`: a commented starter spec for the user's own program, rendered from
templates/job.yaml with the accelerator's generation defaults and the re-queue policy's
defaults, so the file tells the truth about what a spec that leaves them out would get."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from tpujob.catalogue import Accelerator, accelerator
from tpujob.errors import ConflictError, UsageError

TEMPLATE = "job.yaml"
DEFAULT_FILE = "job.yaml"
DEFAULT_ACCELERATOR = "v4-8"
FALLBACK_NAME = "my-job"

# A zone that offers each generation, for the starter to name (the user changes it to where
# their quota is). Google's "TPU regions and zones" page (https://cloud.google.com/tpu/docs/regions-zones):
# v2/v3 us-central1-a/b/c; v4 only us-central2-b; v5e us-central1-a (and others); v5p
# us-central1-a, us-east5-a; v6e us-central1-b, us-east1-d, us-east5-a/b, europe-west4-a.
EXAMPLE_ZONES = {"v2": "us-central1-b", "v3": "us-central1-b", "v4": "us-central2-b",
                 "v5litepod": "us-central1-a", "v5p": "us-east5-a", "v6e": "us-east1-d", "tpu7x": "us-central1-c"}

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
# A comment line that is a field's description: `  # {{?tpu.queued}}`.
_DESCRIPTION = re.compile(r"^([ ]*# )\{\{\?([\w.\[\]]+)\}\}$", re.MULTILINE)
_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._|/-]*$")  # a YAML plain scalar, no quoting needed


@dataclass(frozen=True)
class Starter:
    path: Path
    accelerator: Accelerator
    name: str
    zone: str
    overwrote: bool


def write(path: str | Path | None = None, accelerator_name: str | None = None, *,
          force: bool = False) -> Starter:
    """Write the starter spec at `path` (a directory gets job.yaml in it). Refuses an unknown
    accelerator (SpecError, exit 2) and an existing file unless `force` (ConflictError, exit 4),
    before writing anything."""
    acc = accelerator(accelerator_name or DEFAULT_ACCELERATOR)
    target = Path(path) if path is not None else Path(DEFAULT_FILE)
    if target.is_dir():
        target = target / DEFAULT_FILE
    if not target.parent.is_dir():
        raise UsageError(f"no directory {target.parent} to write {target.name} in")
    existed = target.exists()
    if existed and not force:
        raise ConflictError(f"{target} already exists; tpujob init does not overwrite it "
                            f"(--force does, or name another file)")
    if existed and not target.is_file():
        raise UsageError(f"{target} is not a regular file")
    name = job_name_for(target.resolve().parent)
    zone = EXAMPLE_ZONES[acc.generation.name]
    text = render(acc, name, zone)
    # Without --force, "x" refuses a file made since the check above instead of clobbering it.
    try:
        with open(target, "w" if force else "x") as f:
            f.write(text)
    except FileExistsError:
        raise ConflictError(f"{target} already exists; tpujob init does not overwrite it") from None
    return Starter(target, acc, name, zone, overwrote=existed)


def render(acc: Accelerator, name: str, zone: str) -> str:
    from tpujob.hosts.scripts import templates_dir
    from tpujob.spec import RequeuePolicy

    gen = acc.generation
    values: dict[str, object] = {
        "name": name, "accelerator": acc.name, "hosts": acc.hosts, "chips": acc.chips,
        "zone": zone, "generation": gen.alias, "runtime_version": gen.runtime_version,
        "disk_type": gen.default_disk_type, "disk_types": "|".join(gen.disk_types),
    }
    values.update(RequeuePolicy().model_dump())
    text = (templates_dir() / TEMPLATE).read_text()
    wanted = set(_PLACEHOLDER.findall(text))
    missing, unused = wanted - values.keys(), values.keys() - wanted
    if missing or unused:  # the template and the policy drifted apart: a bug, not user input
        raise ValueError(f"template {TEMPLATE}: missing {sorted(missing)}, unused {sorted(unused)}")
    if not gen.tpu_api:
        text = _compute_only(text, gen.alias, acc.hosts)
    return _PLACEHOLDER.sub(lambda m: _scalar(values[m.group(1)]), _described(text))


def _described(text: str) -> str:
    """Each `# {{?FIELD}}` line as the field's description (spec/reference.py), wrapped as
    comments at the line's indent: what a key means is written once, on its model."""
    import textwrap

    from tpujob.spec.reference import fields

    meanings = {f.path: f.meaning for f in fields()}

    def comment(m: re.Match) -> str:
        if m.group(2) not in meanings:  # the template names a field the models lack: a bug
            raise ValueError(f"template {TEMPLATE}: no spec field {m.group(2)}")
        return textwrap.fill(meanings[m.group(2)], width=100, initial_indent=m.group(1),
                             subsequent_indent=m.group(1), break_on_hyphens=False)

    return _DESCRIPTION.sub(comment, text)


def _compute_only(text: str, alias: str, hosts: int) -> str:
    """The starter of a generation the Cloud TPU API does not serve (TPU7x): its VMs boot an
    image rather than a runtime version, and are made without queued resources (tpu.api auto
    resolves to compute; the spec refuses runtime_version and queued: true there). A multi-host
    one is flex-start: Google's bulk mode takes flex-start or reservation only
    (compute_shapes.multi_host_refusal)."""
    out = []
    for line in text.splitlines(keepends=True):
        key = line.strip().split(":", 1)[0]
        if key == "runtime_version":
            out.append(f"  api: compute                  # {alias}: Compute Engine only (the Cloud TPU API "
                       "does not serve it)\n")
        elif key == "queued" or "runtime_version is" in line or "{{?tpu.queued}}" in line:
            continue
        elif key == "provisioning" and hosts > 1:
            out.append("  provisioning: flex-start      # several VMs: flex-start | reservation (+ reservation) "
                       "only, Google's bulk mode\n")
            out.append("  max_run_duration: 24h         # flex-start: how long the VMs may run, at most 7d\n")
        elif key == "provisioning":
            out.append("  provisioning: spot            # spot | on-demand | flex-start (+ max_run_duration) | "
                       "reservation (+ reservation)\n")
        else:
            out.append(line)
    return "".join(out)


def _scalar(value: object) -> str:
    """A value as a YAML scalar: whole floats as integers, plain words as they are, anything
    else as a double-quoted (JSON) string, which YAML reads back unchanged."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value)
    return text if _PLAIN.match(text) else json.dumps(text)


def job_name_for(directory: Path) -> str:
    """A job name from the project directory's name (`My_Model v2` -> `my-model-v2`), else
    my-job: lowercase letters, digits and hyphens, starting with a letter, at most 40."""
    from tpujob.spec import JOB_NAME

    words = re.sub(r"[^a-z0-9]+", "-", directory.name.lower()).strip("-")
    words = re.sub(r"^[^a-z]+", "", words)[:40].rstrip("-")
    return words if JOB_NAME.match(words) else FALLBACK_NAME
