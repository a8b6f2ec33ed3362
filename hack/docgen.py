"""Render the field reference of docs/api.md from the models, so the docs cannot drift either.

The reference is one table per object type (as API references of Kubernetes operators usually
are), reached from each kind's ``spec`` and ``status``. It replaces the text between the two
markers in docs/api.md; the rest of that file is written by hand. Run::

    python hack/docgen.py --write docs/api.md
    python hack/docgen.py --check docs/api.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final, Literal, get_args, get_origin

from pydantic import BaseModel

from enclave_core.api import KINDS
from enclave_core.api.crdgen import (
    default_of,
    flatten_annotated,
    is_union,
    model_extras,
    schema_for_type,
    union_members,
)
from enclave_core.api.schema import Required

__all__ = ["BEGIN", "END", "render_reference", "splice"]

BEGIN: Final = "<!-- BEGIN GENERATED REFERENCE (python hack/docgen.py --write docs/api.md) -->"
END: Final = "<!-- END GENERATED REFERENCE -->"


def _type_name(tp: Any) -> str:
    flat, _ = flatten_annotated(tp, ())
    if is_union(flat):
        members = union_members(flat)
        if set(members) == {int, str}:
            node = schema_for_type(tp)
            return "quantity" if "pattern" in node else "int-or-string"
        return _type_name(members[0]) if len(members) == 1 else "?"
    origin = get_origin(flat)
    if origin is Literal:
        return "enum"
    if origin is list:
        return "[]" + _type_name(get_args(flat)[0])
    if origin is dict:
        value = get_args(flat)[1]
        return "object (free-form)" if value is Any else "map[string]" + _type_name(value)
    if isinstance(flat, type) and issubclass(flat, BaseModel):
        return f"[{flat.__name__}](#{flat.__name__.lower()})"
    if flat is datetime.datetime:
        return "date-time"
    names = {bool: "boolean", int: "integer", str: "string", float: "number"}
    return names.get(flat, "any") if isinstance(flat, type) or flat is Any else str(flat)


def _models_in(tp: Any) -> Iterator[type[BaseModel]]:
    flat, _ = flatten_annotated(tp, ())
    if isinstance(flat, type) and issubclass(flat, BaseModel):
        yield flat
        return
    for arg in get_args(flat):
        if arg is not type(None) and arg is not Ellipsis and not isinstance(arg, str):
            yield from _models_in(arg)


def _constraints(node: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if "enum" in node:
        out.append(", ".join(f"`{v}`" for v in node["enum"]))
    for key, label in (("minimum", ">="), ("maximum", "<=")):
        if key in node:
            out.append(f"{label} {node[key]}")
    for key, label in (
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minItems", "min items"),
        ("maxItems", "max items"),
        ("minProperties", "min entries"),
        ("maxProperties", "max entries"),
    ):
        if key in node:
            out.append(f"{label} {node[key]}")
    if "pattern" in node and len(node["pattern"]) <= 80:
        out.append(f"pattern `{node['pattern']}`")
    if node.get("x-kubernetes-list-type") == "map":
        out.append("unique by " + ", ".join(node["x-kubernetes-list-map-keys"]))
    if node.get("format") == "byte":
        out.append("base64")
    out.extend(rule["message"] for rule in node.get("x-kubernetes-validations", []))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(cls: type[BaseModel]) -> list[str]:
    lines = [f"#### {cls.__name__}", ""]
    doc = cls.__dict__.get("__doc__")
    if isinstance(doc, str):
        lines += [doc.strip().split("\n\n")[0].replace("\n", " "), ""]
    extras = model_extras(cls)
    if extras.rules:
        lines += ["Rules: " + "; ".join(rule.message for rule in extras.rules) + ".", ""]
    lines += [
        "| Field | Type | Required | Default | Constraints | Description |",
        "| :-- | :-- | :-- | :-- | :-- | :-- |",
    ]
    for name, field in cls.model_fields.items():
        key = field.alias or name
        node = schema_for_type(field.annotation, field.metadata)
        node.update(extras.fields.get(key, {}))
        for rule in extras.field_rules.get(key, ()):
            node.setdefault("x-kubernetes-validations", []).append(rule.to_openapi())
        required = field.is_required() or any(
            isinstance(m, Required) for m in flatten_annotated(field.annotation, field.metadata)[1]
        )
        default = default_of(field)
        default_text = "" if default is None else f"`{_json(default)}`"
        lines.append(
            "| "
            + " | ".join(
                [
                    f"`{key}`",
                    _cell(_type_name(field.annotation)),
                    "yes" if required else "",
                    _cell(default_text),
                    _cell("; ".join(_constraints(node))),
                    _cell((field.description or "").strip()),
                ]
            )
            + " |"
        )
    return [*lines, ""]


def _json(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": "))


def render_reference() -> str:
    """The generated part of docs/api.md."""
    lines = [BEGIN, ""]
    for info in KINDS:
        model = info.model
        spec, status = model.model_fields["spec"], model.model_fields["status"]
        lines += [
            f"### {info.kind} reference",
            "",
            f"Scope: **{info.scope}**. Plural `{info.plural}`; short names: "
            + ", ".join(f"`{s}`" for s in info.short_names)
            + f". `spec`: {_type_name(spec.annotation)}"
            + (" (required)" if spec.is_required() else "")
            + f"; `status`: {_type_name(status.annotation)}.",
            "",
        ]
    lines += ["### Types", ""]
    seen: set[type[BaseModel]] = set()
    roots = [m for info in KINDS for f in ("spec", "status") for m in _models_in(info.model.model_fields[f].annotation)]
    for cls in _reachable(roots, seen):
        lines += _table(cls)
    lines += _v1beta1_section(seen)
    lines.append(END)
    return "\n".join(lines) + "\n"


def _reachable(roots: list[type[BaseModel]], seen: set[type[BaseModel]]) -> list[type[BaseModel]]:
    """Models reachable from ``roots`` and not in ``seen`` (which grows), sorted by name."""
    queue, found = list(roots), list[type[BaseModel]]()
    while queue:
        cls = queue.pop(0)
        if cls in seen:
            continue
        seen.add(cls)
        found.append(cls)
        for field in cls.model_fields.values():
            queue.extend(_models_in(field.annotation))
    return sorted(found, key=lambda c: c.__name__)


def _v1beta1_section(documented: set[type[BaseModel]]) -> list[str]:
    """The v1beta1 shapes that differ from v1beta2; their shared types are the v1beta2 tables above."""
    from enclave_core.api.v1beta1 import MODELS

    lines = [
        "### v1beta1 types",
        "",
        "Kinds whose `enclave.dev/v1beta1` shape differs from v1beta2 (the others are identical but for "
        "`apiVersion`; docs/versions.md maps every field). Types not listed here are the v1beta2 ones above.",
        "",
    ]
    roots = [m for model in MODELS.values() for m in _models_in(model.model_fields["spec"].annotation)]
    for cls in _reachable(roots, documented):
        lines += _table(cls)
    return lines


def splice(document: str) -> str:
    """``document`` with the text between the markers replaced by the current reference."""
    start, end = document.index(BEGIN), document.index(END) + len(END) + 1
    return document[:start] + render_reference() + document[end:]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python hack/docgen.py", description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, metavar="FILE")
    group.add_argument("--check", type=Path, metavar="FILE")
    args = parser.parse_args(argv)
    path: Path = args.write or args.check
    text = path.read_text(encoding="utf-8")
    updated = splice(text)
    if args.write is not None:
        path.write_text(updated, encoding="utf-8")
        return 0
    if updated != text:
        print(f"{path}: field reference is stale; run python hack/docgen.py --write {path}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
