"""The package as pip installs it: every module it imports comes from a dependency it
declares, the shipped search spaces travel inside it, and the built wheel works installed
apart from the clone."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
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


def test_the_built_wheel_works_installed_apart_from_the_clone(tmp_path: Path) -> None:
    # The wheel pip builds (the C++ build is the one `make setup` left in build/), installed
    # into a fresh virtualenv whose only other packages are the dependencies: nothing of
    # the clone on its path. From an empty folder it checks, and plans without Ray, an
    # experiment outside the clone that names a shipped search space, and steps an env.
    wheels = tmp_path / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps"]
    built = subprocess.run(
        [*pip_wheel, "-q", "-w", str(wheels), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("pbt_workbench-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", site, wheel],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    # The dependencies: this environment's packages as a plain path (its .pth files, the
    # clone's editable install among them, are not read).
    deps = Path(next(p for p in sys.path if p.endswith("site-packages")))
    (Path(site) / "dependencies.pth").write_text(f"{deps}\n")

    mine = tmp_path / "elsewhere" / "mine.yaml"
    mine.parent.mkdir()
    mine.write_text(
        "name: mine\nalgorithm: PPO\nenv: {id: sim_ext/CartPole-v1}\n"
        "search_space: {file: ppo.yaml}\nscheduler: {type: pbt}\npopulation: 4\n"
        "stop: {iterations: 1}\n"
    )
    probe = (
        "import sys, gymnasium as gym, sim_ext, workbench\n"
        "from workbench.cli import main\n"
        "print(workbench.__file__); print(sim_ext.__file__)\n"
        "env = gym.make('sim_ext/CartPole-v1'); env.reset(seed=0); env.step(0)\n"
        "codes = [main(['validate', sys.argv[1]]), main(['run', sys.argv[1], '--dry-run'])]\n"
        "print('codes', codes)\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    ran = subprocess.run(
        [python, "-c", probe, str(mine)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=empty,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    lines = ran.stdout.splitlines()
    assert lines[0].startswith(site) and lines[1].startswith(site), lines[:2]
    assert "codes [0, 0]" in ran.stdout, ran.stdout[-2000:]
    assert "mine.yaml: ok (PPO on sim_ext/CartPole-v1, pbt over" in ran.stdout
    assert not (empty / "results").exists()  # a dry run writes nothing
