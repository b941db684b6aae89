"""Compact JSON schemas for the tool list: every character of `tools/list` is paid for in the host's context."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

# Titles repeat the property names; definitions are inlined.
_NEVER_PUBLISHED = ("title", "$defs")
# A tool's result carries every field, and its text says what they mean: no required lists or descriptions.
_NOT_IN_RESULTS = ("required", "description")


def input_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's arguments: compacted, and an optional argument's `null` left out (omitting it says the same)."""
    compact = _compact(schema, schema.get("$defs", {}), dropped=_NEVER_PUBLISHED)
    required = set(compact.get("required", ()))
    for name, prop in compact.get("properties", {}).items():
        if name not in required:
            compact["properties"][name] = _without_null(prop)
    return compact


def result_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The output schema of a tool whose structured content is `model`: its fields and their types. Lists carry
    no item schema: a client that validates results would otherwise check a 1,000-row result cell by cell,
    which takes longer than the query."""
    schema = model.model_json_schema(mode="serialization")
    compact = _compact(schema, schema.get("$defs", {}), dropped=_NEVER_PUBLISHED + _NOT_IN_RESULTS)
    for prop in compact["properties"].values():
        for variant in (prop, *prop.get("anyOf", ())):
            variant.pop("items", None)
    return compact


def _compact(node: Any, definitions: dict[str, Any], dropped: tuple[str, ...]) -> Any:
    """`node` with references inlined, and the `dropped` keywords, null defaults and `additionalProperties: true`
    left out. A union stays `anyOf` with one type per branch: a list of types (`["string", "null"]`) is legal JSON
    Schema, but hosts that map tool schemas onto a one-type dialect (Gemini's function declarations) reject it."""
    if isinstance(node, list):
        return [_compact(item, definitions, dropped) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        referenced = definitions[node["$ref"].rsplit("/", 1)[-1]]
        return _compact(
            {**referenced, **{k: v for k, v in node.items() if k != "$ref"}}, definitions, dropped
        )
    out = {}
    for key, value in node.items():
        if (
            key in dropped
            or (key == "default" and value is None)
            or (key, value) == ("additionalProperties", True)
        ):
            continue
        if key == "properties":  # property names are data, not keywords: a property called "title" stays
            out[key] = {name: _compact(prop, definitions, dropped) for name, prop in value.items()}
        else:
            out[key] = _compact(value, definitions, dropped)
    return out


def _without_null(prop: dict[str, Any]) -> dict[str, Any]:
    """An optional argument's `X | None` as X: omitting the argument says the same as null."""
    variants = prop.get("anyOf")
    if variants is None:
        return prop
    rest = [v for v in variants if v != {"type": "null"}]
    others = {k: v for k, v in prop.items() if k != "anyOf"}
    return {**others, **rest[0]} if len(rest) == 1 else {**others, "anyOf": rest}
