"""Loading an experiment file: YAML, ``--set`` overrides, and pydantic's errors as the
workbench's one-line problems (the file, the field, the value and what would be valid)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from workbench.errors import ExperimentError, Problem, did_you_mean, one_of
from workbench.experiment.schema import (
    AshaSection,
    Experiment,
    FifoSection,
    Pb2Section,
    PbtSection,
    ReplaySection,
)
from workbench.experiment.yaml_input import apply_overrides, read_yaml


def json_schema() -> dict[str, Any]:
    """The JSON Schema of experiment files (for editors: yaml-language-server)."""
    schema = Experiment.model_json_schema(by_alias=False)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "PBT workbench experiment"
    population = schema["properties"]["population"]
    schema["properties"]["num_samples"] = {
        **population,
        "title": "Num Samples",
        "description": "Alias of population.",
    }
    schema["not"] = {"required": ["population", "num_samples"]}
    return schema


# --- validating ------------------------------------------------------------------------------


def _problems_from(err: ValidationError, file: str, model: type[BaseModel]) -> list[Problem]:
    problems = []
    for e in err.errors():
        loc = [str(part) for part in e["loc"]]
        # Drop pydantic's union tags (scheduler.pbt.x -> scheduler.x).
        section: type[BaseModel] = model
        if len(loc) >= 2 and loc[0] == "scheduler" and loc[1] in _SCHEDULERS:
            section = _SCHEDULERS[loc.pop(1)]
        field = ".".join(loc)
        value = e.get("input")
        if e["type"] == "extra_forbidden":
            valid = (
                _fields_at(model, loc[:-1]) if section is model else _fields_at(section, loc[1:-1])
            )
            message = f"unknown key {loc[-1]!r}{did_you_mean(loc[-1], valid)}; valid: " + (
                one_of(valid) if valid else "none"
            )
        elif e["type"] == "missing":
            message = "is required"
        elif e["type"] == "union_tag_invalid":
            message = f"unknown type {value.get('type')!r}; valid: {one_of(_SCHEDULERS)}"
            field = field.rsplit(".", 1)[0] + ".type" if field else "type"
        elif e["type"] == "union_tag_not_found":
            message = f"needs a type: one of {one_of(_SCHEDULERS)}"
        else:
            text = e["msg"].removeprefix("Value error, ")
            shown = "" if isinstance(value, dict) else f"{value!r}: "
            message = f"{shown}{text}"
        problems.append(Problem(file, field, message))
    return problems


_SCHEDULERS: dict[str, type[BaseModel]] = {
    "pbt": PbtSection,
    "pb2": Pb2Section,
    "asha": AshaSection,
    "fifo": FifoSection,
    "replay": ReplaySection,
}


def _fields_at(model: type[BaseModel], loc: list[str]) -> list[str]:
    """The valid keys of the section at ``loc`` (for did-you-mean on unknown keys)."""
    current: Any = model
    parts = iter(loc)
    for part in parts:
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        annotation = fields[part].annotation
        current = _model_in(annotation)
        if current is None:
            return []
        if getattr(annotation, "__origin__", None) in (dict, list):
            next(parts, None)  # a key of the mapping (a parameter name) or an index
    fields = getattr(current, "model_fields", {})
    names = set(fields) | {f.alias for f in fields.values() if f.alias}
    return sorted(names)


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    """Reads, overrides and validates one experiment file (the schema only; see resolve)."""
    file = Path(path)
    raw = read_yaml(file)
    if not isinstance(raw, dict):
        raise ExperimentError.single(
            str(file), "", f"must be a mapping of sections, got {type(raw).__name__}"
        )
    raw = apply_overrides(raw, overrides or [], str(file))
    try:
        return Experiment.model_validate(raw)
    except ValidationError as err:
        raise ExperimentError(_problems_from(err, str(file), Experiment)) from None
