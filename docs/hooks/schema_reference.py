"""MkDocs hook: the reference of every experiment-file field, generated from the schema.

A page that holds the marker ``<!-- experiment-reference -->`` gets it replaced, at build
time, by one table per section of the experiment file, read off the pydantic models that
load the file (``Experiment`` and every model its fields hold: sections, the scheduler
variants, nested blocks): each field's name, type with its constraints, default and
description. Nothing is written by hand, so the page cannot drift from the schema; a field
without a description still gets its row (type and default).
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

# The one place that names the schema's module.
from workbench.experiment.schema import Experiment

MARKER = "<!-- experiment-reference -->"
END = "<!-- /experiment-reference -->"
PAGE = Path(__file__).resolve().parents[1] / "experiment-file.md"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """The built page gets the reference fresh from the schema, without the markers."""
    if MARKER not in markdown:
        return markdown
    before, _, rest = markdown.partition(MARKER)
    _, _, after = rest.partition(END) if END in rest else ("", "", rest)
    return before + reference(Experiment) + after


def with_reference(markdown: str) -> str:
    """The page's source with the reference written between its markers, so that a reader
    of the repository (a code host shows the .md, not the site) sees it too."""
    before, _, rest = markdown.partition(MARKER)
    _, _, after = rest.partition(END) if END in rest else ("", "", rest)
    return f"{before}{MARKER}\n\n{reference(Experiment).strip()}\n\n{END}{after}"


# --- walking the models ------------------------------------------------------------------------


def reference(root: type[BaseModel]) -> str:
    """Every section reachable from `root`, each followed by the sections its fields hold
    (depth first, in the order of the fields): the top level, `env`, ..., `resources`,
    `resources.env_runners`, ..."""
    sections: list[tuple[str, type[BaseModel]]] = []
    anchors: dict[type[BaseModel], str] = {root: "top-level"}

    def visit(path: str, model: type[BaseModel]) -> None:
        sections.append((path, model))
        children = []
        for name, field in model.model_fields.items():
            for child, where in _models_in(field.annotation, f"{path}{name}"):
                if child not in anchors:
                    anchors[child] = _anchor(where, child)
                    children.append((where, child))
        for where, child in children:
            visit(where, child)

    visit("", root)
    return "\n\n".join(_section(path, model, anchors) for path, model in sections) + "\n"


def _models_in(annotation: Any, path: str) -> list[tuple[type[BaseModel], str]]:
    """The models a field's type holds, each with the path its fields are written at."""
    found: list[tuple[type[BaseModel], str]] = []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        found.append((annotation, f"{path}."))
        return found
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _models_in(args[0], path)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            found += _models_in(arg, path)
    elif origin is list:
        found += _models_in(args[0], f"{path}[]")
    elif origin is dict:
        found += _models_in(args[1], f"{path}.<name>")
    return found


def _anchor(path: str, model: type[BaseModel]) -> str:
    tag = _discriminator(model)
    text = path.rstrip(".") + (f"-{tag}" if tag else "")
    return "".join(c if c.isalnum() or c == "_" else "-" for c in text).strip("-").lower()


def _discriminator(model: type[BaseModel]) -> str | None:
    """The literal `type` of a scheduler variant (pbt, pb2, ...), else None."""
    field = model.model_fields.get("type")
    if field is None:
        return None
    args = typing.get_args(field.annotation)
    if typing.get_origin(field.annotation) is typing.Literal and len(args) == 1:
        return str(args[0])
    return None


# --- one section -------------------------------------------------------------------------------


def _section(path: str, model: type[BaseModel], anchors: dict[type[BaseModel], str]) -> str:
    tag = _discriminator(model)
    if path:
        title = f"`{path.rstrip('.')}`" + (f" with `type: {tag}`" if tag else "")
    else:
        title = "The top level"
    lines = [f"### {title} {{#{anchors[model]}}}", ""]
    doc = _docstring(model)
    if doc:
        lines += [doc, ""]
    lines += ["| field | type | default | description |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        shown = f"`{name}`" + (f" (or `{field.alias}`)" if field.alias else "")
        cells = [
            shown,
            _cell(_type(field.annotation, anchors) + _constraints(field.metadata)),
            _cell(_default(field)),
            _cell(_description(field)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _docstring(model: type[BaseModel]) -> str:
    doc = model.__doc__ or ""
    if not doc or doc == BaseModel.__doc__:
        return ""
    return " ".join(line.strip() for line in doc.strip().splitlines() if line.strip())


def _description(field: FieldInfo) -> str:
    """The field's own description; for a section without one, its model's docstring; for
    a choice of sections (the schedulers), which field chooses."""
    if field.description:
        return field.description
    models = [model for model, _ in _models_in(field.annotation, "")]
    if len(models) == 1:
        return _docstring(models[0])
    tags = [tag for tag in map(_discriminator, models) if tag]
    if tags and len(tags) == len(models):
        return f"One of {len(tags)} kinds, chosen by its `type`: {', '.join(tags)}."
    return ""


def _cell(text: str) -> str:
    """Text fit for a table cell: no line breaks, pipes escaped, and outside code spans
    angle brackets escaped (`<storage>/mlflow.db` is not an HTML tag)."""
    parts = text.replace("\n", " ").split("`")
    for i in range(0, len(parts), 2):  # the even parts are outside code spans
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")


# --- types, constraints, defaults --------------------------------------------------------------


def _type(annotation: Any, anchors: dict[type[BaseModel], str]) -> str:
    if annotation is type(None) or annotation is None:
        return "`null`"
    if annotation is Any:
        return "any"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        tag = _discriminator(annotation)
        label = f"`{{type: {tag}, ...}}`" if tag else "section"
        return f"[{label}](#{anchors[annotation]})"
    if isinstance(annotation, type):
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            annotation.__name__, annotation.__name__
        )
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0], anchors) + _constraints(list(args[1:]))
    if origin is typing.Literal:
        return " | ".join(f"`{_value(a)}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a, anchors) for a in args)
    if origin is list:
        return f"list of {_type(args[0], anchors)}"
    if origin is tuple:
        return "[" + ", ".join(_type(a, anchors) for a in args) + "]"
    if origin is dict:
        return f"mapping of {_type(args[0], anchors)} to {_type(args[1], anchors)}"
    return f"`{annotation}`"


def _constraints(metadata: list[Any]) -> str:
    parts = []
    for item in metadata:
        if isinstance(item, annotated_types.Gt):
            parts.append(f"> {item.gt}")
        elif isinstance(item, annotated_types.Ge):
            parts.append(f">= {item.ge}")
        elif isinstance(item, annotated_types.Lt):
            parts.append(f"< {item.lt}")
        elif isinstance(item, annotated_types.Le):
            parts.append(f"<= {item.le}")
        elif isinstance(item, annotated_types.MinLen):
            parts.append(f"at least {item.min_length} {_items(item.min_length)}")
        elif isinstance(item, annotated_types.MaxLen):
            parts.append(f"at most {item.max_length} {_items(item.max_length)}")
        elif getattr(item, "pattern", None):
            parts.append(f"matching `{item.pattern}`")
    return f" ({', '.join(parts)})" if parts else ""


def _items(count: int) -> str:
    return "item" if count == 1 else "items"


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            given = value.model_dump(mode="json", exclude_defaults=True)
            return f"`{_value(given)}`" if given else "its fields' defaults"
        return f"`{_value(value)}`"
    if field.default is PydanticUndefined:
        return "required"
    return f"`{_value(field.default)}`"


def _value(value: Any) -> str:
    """A value as it is written in the YAML file (flow style)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return json.dumps(value)


if __name__ == "__main__":
    # `.venv/bin/python docs/hooks/schema_reference.py`: after a change to the schema.
    PAGE.write_text(with_reference(PAGE.read_text()))
