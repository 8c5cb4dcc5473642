"""The package as pip installs it: every module it imports comes from a dependency it
declares, and the shipped search spaces travel inside it (the built wheel installed apart
from the clone: tests/cli/test_installed_wheel.py)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest
import tomllib

from workbench.experiment.resolve import load_and_resolve

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
OURS = {"workbench", "sim_ext"}
# Imported only inside a guard that does without it: GitPython (mlflow's) for the
# git-dirty tag of a run (workbench/tracking/run_context.py).
OPTIONAL = {"git"}


RUNTIME_EXTRAS = ("box2d", "envpool", "dashboard")  # the others are for developers


def _imports() -> dict[str, tuple[str, bool]]:
    """Top-level module -> (a file importing it, whether any import of it is at module
    level), over the package's sources."""
    found: dict[str, tuple[str, bool]] = {}
    for package in OURS:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            module_level = {id(node) for node in tree.body}
            for node in ast.walk(tree):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    where, eager = found.get(top, (str(path.relative_to(ROOT)), False))
                    found[top] = (where, eager or id(node) in module_level)
    return found


def _names(requirements: list[str]) -> set[str]:
    names = set()
    for requirement in requirements:
        match = re.match(r"[A-Za-z0-9_.\-]+", requirement)
        assert match, requirement
        names.add(match.group(0).lower().replace("_", "-"))
    return names


def test_every_third_party_import_is_a_declared_dependency() -> None:
    """A run-time dependency, or an optional extra's imported only where it is used."""
    providers = importlib.metadata.packages_distributions()
    declared = _names(PROJECT["project"]["dependencies"])
    extras = PROJECT["project"]["optional-dependencies"]
    optional = _names([r for extra in RUNTIME_EXTRAS for r in extras[extra]])
    missing = []
    for module, (where, eager) in sorted(_imports().items()):
        if module in sys.stdlib_module_names or module in OURS | OPTIONAL:
            continue
        # Not installed here (an optional extra's): the module's own name stands for it.
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [module])}
        if dists & declared or (dists & optional and not eager):
            continue
        missing.append(f"{module} ({where}; from {sorted(dists) or 'nothing installed'})")
    assert not missing, "imported but not declared in [project].dependencies: " + ", ".join(missing)


def test_the_wheel_carries_the_shipped_search_spaces() -> None:
    packages = PROJECT["tool"]["scikit-build"]["wheel"]["packages"]
    assert packages["workbench/search_spaces"] == "search_spaces"
    assert (ROOT / "search_spaces" / "ppo.yaml").is_file()


def test_a_shipped_search_space_resolves_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An experiment outside the clone, run from an empty folder: ppo.yaml is found
    # where the package keeps it.
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "elsewhere" / "mine.yaml"
    path.parent.mkdir()
    path.write_text(
        "name: mine\nalgorithm: PPO\nenv: {id: sim_ext/CartPole-v1}\n"
        "search_space: {file: ppo.yaml}\nscheduler: {type: pbt}\npopulation: 4\n"
        "stop: {iterations: 1}\n"
    )
    resolved = load_and_resolve(path, check_results=False)
    assert "lr" in resolved.tune_space
