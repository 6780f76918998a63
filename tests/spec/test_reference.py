"""What each spec field means is written once, on its model (`Field(description=...)`), and read
from there by what a user sees: `tpujob validate --fields`, the error a refused field gets, the
starter `tpujob init` writes, and docs/spec.md's table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import BaseModel
from spec_texts import dedent_spec

from tpujob.spec import JobSpec, reference

ROOT = Path(__file__).resolve().parents[2]


def _model_fields(model: type[BaseModel], seen: set) -> list[tuple[str, object]]:
    """(model.field, FieldInfo) of every model a spec nests, found by walking the annotations."""
    out = []
    for name, field in model.model_fields.items():
        out.append((f"{model.__name__}.{name}", field))
        stack = [field.annotation]
        while stack:
            a = stack.pop()
            if isinstance(a, type) and issubclass(a, BaseModel) and a not in seen:
                seen.add(a)
                out += _model_fields(a, seen)
            stack += list(getattr(a, "__args__", ()))
    return out


def test_every_field_of_a_spec_carries_its_meaning():
    undescribed = [name for name, field in _model_fields(JobSpec, set()) if not field.description]
    assert undescribed == []
    assert len(reference.fields()) >= 70


def test_docs_spec_md_holds_the_table_the_models_make():
    text = (ROOT / "docs" / "spec.md").read_text()
    table = text.split(reference.DOC_BEGIN, 1)[1].split(reference.DOC_END, 1)[0]
    assert reference.DOC_BEGIN + table + reference.DOC_END == reference.markdown(), \
        "docs/spec.md is out of step with tpujob/spec/models.py: run scripts/docs_tables"


def test_validate_fields_lists_every_field_with_its_default_and_meaning(cli):
    result = cli("validate", "--fields")
    assert result.code == 0, result.err
    flat = " ".join(result.out.split())
    for f in reference.fields():
        assert f"{f.path}: {f.kind}" in result.out
        assert " ".join(f.meaning.split()) in flat
    assert "requeue.max_preemptions: whole number (default 20)" in result.out
    assert "tpu.accelerator: text (required)" in result.out
    rows = json.loads(cli("validate", "--fields", "--json").out)
    assert {"field": "tpu.provisioning", "type": "spot | on-demand | preemptible | flex-start | reservation",
            "default": "spot", "meaning": JobSpec.model_fields["tpu"].annotation.model_fields[
                "provisioning"].description} in rows


@pytest.mark.parametrize("args", [("validate",), ("validate", "--fields", "job.yaml")])
def test_validate_wants_a_spec_or_fields_not_both(cli, args):
    result = cli(*args)
    assert result.code == 2
    assert "--fields" in result.error_line


def test_a_refused_field_is_told_what_it_is_for(cli, spec_file):
    missing = spec_file(dedent_spec("""
        name: demo
        tpu: {zone: us-central2-b}
        run: {command: x}
        """))
    assert cli("validate", missing).error_line == (
        "error: tpu.accelerator (line 2): required key is missing (the accelerator type: v2-N, v3-N, "
        "v4-N, v5p-N, tpu7x-N (N TensorCores), v5litepod-N, v6e-N (N chips))")
    wrong = spec_file(dedent_spec("""
        name: demo
        tpu: {accelerator: v4-8, zone: us-central2-b}
        run: {command: x}
        requeue: {max_nan: lots}
        """))
    line = cli("validate", wrong).error_line
    assert line.startswith("error: requeue.max_nan (line 4): ")
    assert line.endswith("(new slices after a NaN exit (exit 76) before FAILED nan_budget)")


def test_the_starter_says_what_each_key_it_writes_means(cli, tmp_path):
    path = tmp_path / "job.yaml"
    assert cli("init", path).code == 0
    text = path.read_text()
    assert "{{" not in text
    comments = " ".join(" ".join(line.strip().lstrip("#").split())
                        for line in text.splitlines() if line.strip().startswith("#"))
    shown = [f for f in reference.fields() if f.path.startswith("requeue.")
             or f.path in ("tpu.provisioning", "tpu.queued", "sync", "run.command", "run_dir", "secrets")]
    for f in shown:
        assert " ".join(f.meaning.split()) in comments, f.path
    # Each described key's comment sits right above it.
    lines = text.splitlines()
    at = lines.index("  max_nan: 3")
    assert re.sub(r"^\s*# ", "", lines[at - 1]) == reference.meaning(("requeue", "max_nan"))
