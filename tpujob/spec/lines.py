"""From YAML text to a JobSpec, with every field's YAML line kept: a refusal names the field and
the line it is on (`SpecError(field=..., line=...)`)."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from tpujob.errors import SpecError
from tpujob.spec.models import JobSpec, mask_webhook
from tpujob.spec.reference import meaning


def _line_index(node, path=(), out=None) -> dict[tuple, int]:
    """Map each key path of a composed YAML document to its 1-based line."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = path + (key.value,)
            if child in out:
                # PyYAML keeps the last of two equal keys silently; a spec must not.
                raise SpecError("key given twice", field=dotted(child), line=key.start_mark.line + 1)
            out[child] = key.start_mark.line + 1
            _line_index(value, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[path + (i,)] = item.start_mark.line + 1
            _line_index(item, path + (i,), out)
    return out


def dotted(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def field_error(message: str, path: tuple, lines: dict[tuple, int]) -> SpecError:
    """The refusal of the field at `path` (a key path of the spec), with its YAML line."""
    return SpecError(message, field=dotted(path), line=lines.get(path))


def _model_at(path: tuple) -> type[BaseModel] | None:
    model: Any = JobSpec
    for part in path:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return None
        annotation = field.annotation
        args = getattr(annotation, "__args__", ())
        inner = next((a for a in (annotation, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if inner is None:
            for a in args:
                for b in getattr(a, "__args__", ()):
                    if isinstance(b, type) and issubclass(b, BaseModel):
                        inner = b
        model = inner
    return model


def _first_error(exc: ValidationError, lines: dict[tuple, int]) -> SpecError:
    errors = exc.errors()
    # An unknown key usually explains a "missing" one next to it (a typo): report it first.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        known = list(parent.model_fields) if parent else []
        guess = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"; did you mean {guess[0]!r}?" if guess else (f" (known: {', '.join(known)})" if known else "")
        message = f"unknown key{hint}"
    elif kind == "missing":
        message = "required key is missing"
    else:
        # A validator's own message, without pydantic's "Value error, " in front of it.
        msg = err["msg"].removeprefix("Value error, ")
        message = msg[0].lower() + msg[1:]
        if "input" in err and not isinstance(err["input"], (dict, list)):
            message += f" (got {err['input']!r})"
    if kind != "extra_forbidden" and (about := meaning(loc)):
        # What the field is for, from its model (spec/reference.py): the fix is then in sight.
        message += f" ({about[0].lower()}{about[1:].rstrip('.')})"
    line = lines.get(loc) or lines.get(loc[:-1])
    return SpecError(message, field=dotted(loc), line=line)


def parse(text: str, source: str = "<spec>") -> tuple[JobSpec, dict[tuple, int]]:
    """Parse YAML text into a JobSpec (structure and types only; see `resolve` for the rules)."""
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or exc.__class__.__name__
        raise SpecError(f"{source}: invalid YAML{where}: {problem}") from exc
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a job spec is a YAML mapping with at least name, tpu and run")
    lines = _line_index(node)
    try:
        return JobSpec.model_validate(data), lines
    except ValidationError as exc:
        raise _first_error(exc, lines) from None


def shown_text(text: str, spec: JobSpec) -> str:
    """The spec's YAML as submitted, fit to show (the dashboard's Spec section): every literal
    webhook URL the spec notifies masked (`mask_webhook`) where it is written, the rest (comments,
    layout) as it was. Found by the YAML nodes holding it, so a quoted, folded or anchored URL
    is masked too; then anywhere else it is written verbatim (a comment)."""
    hidden = {c.webhook: mask_webhook(c.webhook) for c in spec.notify
              if c.webhook and mask_webhook(c.webhook) != c.webhook}
    if not hidden:
        return text
    spans: dict[int, tuple[int, str]] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        root = None
    seen: set[int] = set()
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode) and node.value in hidden:
            start, end = node.start_mark.index, node.end_mark.index
            # An anchor or a tag written before the value starts its node: keep them.
            prefix = re.match(r"(?:[&!]\S*\s+)*", text[start:end])
            spans[start + (prefix.end() if prefix else 0)] = (end, json.dumps(hidden[node.value]))
        elif isinstance(node, yaml.MappingNode):
            stack.extend(part for pair in node.value for part in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    for start in sorted(spans, reverse=True):
        end, shown = spans[start]
        text = text[:start] + shown + text[end:]
    for url in sorted(hidden, key=len, reverse=True):
        text = text.replace(url, hidden[url])
    return text
