"""sim_ext/_core.pyi describes the compiled module as it really is."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from sim_ext import _core

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "sim_ext" / "_core.pyi"


def _stub_classes() -> dict[str, ast.ClassDef]:
    tree = ast.parse(STUB.read_text())
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def test_mypy_stubtest_finds_the_stub_and_the_module_in_agreement() -> None:
    # stubtest imports the real module and reports anything present in one and
    # missing from the other, or typed inconsistently.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy.stubtest",
            "sim_ext._core",
            "--allowlist",
            str(Path(__file__).with_name("stubtest_allowlist.txt")),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_compiled_environment_has_a_stub_class() -> None:
    compiled = {name for name in dir(_core) if hasattr(getattr(_core, name), "env_name")}
    stubbed = {name for name, node in _stub_classes().items() if not name.startswith("_")}
    assert compiled == stubbed


def test_method_parameter_names_match_the_pybind11_signatures() -> None:
    # pybind11 methods carry no inspectable signature (stubtest skips them), but
    # their docstrings start with one: compare parameter names against the stub.
    base = _stub_classes()["_BatchEnv"]
    checked = 0
    for node in base.body:
        if not isinstance(node, ast.FunctionDef) or any(
            isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list
        ):
            continue
        stub_params = [a.arg for a in node.args.args]
        for cls_name in (n for n in dir(_core) if hasattr(getattr(_core, n), "env_name")):
            doc = getattr(getattr(_core, cls_name), node.name).__doc__
            match = re.match(rf"{node.name}\((.*?)\) ->", doc.strip())
            assert match, f"{cls_name}.{node.name}: no signature in {doc!r}"
            runtime_params = re.findall(r"(?:^|, )(\w+): ", match.group(1))
            assert runtime_params == stub_params, f"{cls_name}.{node.name}"
            checked += 1
    assert checked >= 8
