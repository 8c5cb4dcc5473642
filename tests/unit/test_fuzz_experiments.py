"""Fuzzing experiment files: whatever a file holds, `workbench validate` says ok (exit 0)
or names each problem on a line of its own (exit 2), and never shows a traceback.

The examples are drawn from the schema itself: a field path of the JSON Schema (every
section and field, scheduler variants included), set to a value of an arbitrary kind
(huge, negative, NaN, infinite, text, nested, empty) in a valid experiment; several such
edits per file, and sometimes the YAML around them broken.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.experiments import tiny_ppo
from workbench.cli import main
from workbench.experiment.loading import json_schema


def _paths(schema: dict[str, Any]) -> list[tuple[str, ...]]:
    """Every field path of the experiment schema (a section's fields, one level down)."""
    defs = schema["$defs"]
    out: list[tuple[str, ...]] = []

    def section(node: dict[str, Any]) -> dict[str, Any] | None:
        ref = node.get("$ref")
        if ref:
            return dict(defs[ref.rsplit("/", 1)[-1]])
        for option in node.get("anyOf", []) + node.get("oneOf", []):
            found = section(option)
            if found:
                return found
        return None

    for name, node in schema["properties"].items():
        out.append((name,))
        inner = section(node)
        if inner is not None:
            for field, child in inner.get("properties", {}).items():
                out.append((name, field))
                deeper = section(child)
                if deeper is not None:
                    out += [(name, field, f) for f in deeper.get("properties", {})]
    # The scheduler's variants are a discriminated union: their fields too.
    for variant in ("PbtSection", "Pb2Section", "AshaSection", "ReplaySection"):
        out += [("scheduler", f) for f in defs[variant]["properties"]]
    return sorted(set(out))


PATHS = _paths(json_schema())
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**15), max_value=10**15),
    st.sampled_from([0, -1, 1, 2**31, 10**12, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e-300, 2.7]),
    st.text(max_size=20),
    st.sampled_from(["pbt", "pb2", "asha", "fifo", "replay", "random", "grid", "auto", ""]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=8), inner, max_size=3),
    ),
    max_leaves=6,
)
EDITS = st.lists(st.tuples(st.sampled_from(PATHS), VALUES), min_size=1, max_size=4)


def _apply(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = data
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {"type": "pbt"} if key == "scheduler" else {}
        node = child
    node[path[-1]] = value


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(edits=EDITS, break_yaml=st.booleans())
def test_validate_says_ok_or_names_each_problem_and_never_shows_a_traceback(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edits: list[tuple[tuple[str, ...], Any]],
    break_yaml: bool,
) -> None:
    data = tiny_ppo(tmp_path)
    for path, value in edits:
        _apply(data, path, value)
    file = tmp_path / "fuzz.yaml"
    text = yaml.safe_dump(data, allow_unicode=True)
    if break_yaml:
        text = text.replace(":", ": [", 1)
    file.write_text(text, encoding="utf-8")
    capsys.readouterr()
    code = main(["validate", str(file)])
    out, err = capsys.readouterr()
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err + out
    if code == 0:
        assert out.startswith(f"{file}: ok"), out
    else:
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines and all(line.startswith(f"{file}:") for line in lines), err
