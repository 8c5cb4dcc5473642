"""Experiment and search-space files as YAML: read safely, with errors that name the
file, the line and the column, and ``--set`` overrides applied to what was read."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from workbench.errors import ExperimentError


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads 1e-3 (no dot) as a float, as YAML 1.2 and people do."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_yaml(path: Path) -> Any:
    """safe_load with errors that give the file, line and column."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ExperimentError.single(str(path), "", "no such file") from None
    except OSError as err:
        raise ExperimentError.single(str(path), "", f"cannot be read: {err.strerror}") from None
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise ExperimentError.single(
            str(path), "", f"invalid YAML at {where}: {err.problem}"
        ) from None
    except yaml.YAMLError as err:
        raise ExperimentError.single(str(path), "", f"invalid YAML: {err}") from None


def apply_overrides(raw: dict[str, Any], overrides: list[str], file: str) -> dict[str, Any]:
    """``--set key.path=value`` (the value read as YAML: 3, 1e-3, true, [1, 2], text)."""
    data = copy.deepcopy(raw)
    for item in overrides:
        if "=" not in item:
            raise ExperimentError.single(
                file, "--set", f"{item!r} is not key.path=value (for example stop.iterations=20)"
            )
        path, _, text = item.partition("=")
        keys = path.strip().split(".")
        if not all(keys):
            raise ExperimentError.single(file, "--set", f"{path!r} is not a dotted key path")
        try:
            value = yaml.load(text, Loader=_Loader)
        except yaml.YAMLError:
            value = text
        node = data
        for key in keys[:-1]:
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                raise ExperimentError.single(
                    file, path, f"--set cannot go inside {key!r}, which is {child!r}"
                )
            node = child
        node[keys[-1]] = value
    return data
