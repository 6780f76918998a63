"""What each spec field means, read from the models' own descriptions (`Field(description=...)`
in models.py), the one place it is written: `tpujob validate --fields` lists it, a refused
field's error ends with it, `tpujob init`'s starter carries it as comments, and docs/spec.md's
table is generated from it (tests/spec/test_reference.py keeps the file in step)."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from tpujob.spec.models import JobSpec

# docs/spec.md's generated part lies between these lines.
DOC_BEGIN = "<!-- generated from tpujob/spec/models.py by scripts/docs_tables; edit the models, not this table -->"
DOC_END = "<!-- end of fields -->"


@dataclass(frozen=True)
class FieldDoc:
    path: str  # as the YAML nests it: `tpu.fallback[].zone`
    kind: str  # the values it takes, in words
    default: str  # "required", or the value a spec that leaves it out gets
    meaning: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.path, "type": self.kind, "default": self.default, "meaning": self.meaning}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _is_list(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    return origin is list or (origin in (typing.Union, types.UnionType)
                              and any(_is_list(a) for a in typing.get_args(annotation)))


def _kind(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        shown = [_kind(a) for a in args if a is not type(None)]
        return " or ".join(shown)
    if origin is list:
        return f"list of {_kind(args[0])}"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    return {str: "text", int: "whole number", float: "number", bool: "true | false"}.get(annotation, str(annotation))


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()
        return "[]" if value == [] else "{}" if value == {} else (
            "its fields' defaults" if isinstance(value, BaseModel) else _scalar(value))
    return "unset" if field.default is None or field.default is PydanticUndefined else _scalar(field.default)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def _walk(model: type[BaseModel], prefix: str, out: list[FieldDoc]) -> None:
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        if not field.description:
            raise ValueError(f"spec field {path} has no description")  # a bug: models.py says
        out.append(FieldDoc(path, _kind(field.annotation), _default(field), field.description))
        inner = "[]" if _is_list(field.annotation) else ""
        for sub in _models_in(field.annotation):
            _walk(sub, f"{path}{inner}.", out)


def fields() -> list[FieldDoc]:
    """Every field of a job spec, in the models' order, nested ones after their parent."""
    out: list[FieldDoc] = []
    _walk(JobSpec, "", out)
    return out


def path_of(loc: tuple) -> str:
    """A key path (`("tpu", "fallback", 0, "zone")`) as `fields()` names it: `tpu.fallback[].zone`."""
    text = ""
    for part in loc:
        text += "[]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def meaning(loc: tuple) -> str | None:
    """The description of the field at a key path, or None where the path names no field (an
    unknown key, a list item, a union's branch that pydantic names by type)."""
    wanted = path_of(tuple(p for p in loc if isinstance(p, (str, int))))
    return next((f.meaning for f in fields() if f.path == wanted), None)


def markdown() -> str:
    """docs/spec.md's table: one row per field."""
    rows = ["| field | takes | default | meaning |", "| --- | --- | --- | --- |"]
    for f in fields():
        cells = (f"`{f.path}`", f.kind, f.default, f.meaning)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join([DOC_BEGIN, "", *rows, "", DOC_END])
