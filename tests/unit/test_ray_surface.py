"""Ray's internals stay in one place, and that place says what it relies on.

``tools/check_ray_internals.py`` (``make lint``) fails on a private Ray import or read
outside the allowed modules; ``workbench.tune_ext.ray_surface`` lists what those modules
rely on, checked here against the installed Ray, torch and Optuna.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from workbench.tune_ext.ray_surface import SURFACE, Private

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "check_ray_internals.py"


@functools.cache
def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_ray_internals", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _has(owner: Any, name: str) -> bool:
    """The owner has the name, as a class or module attribute or as an attribute its
    classes (or, for a module, its functions) assign to ``self``."""
    if hasattr(owner, name):
        return True
    sources = [owner] if inspect.ismodule(owner) else list(inspect.getmro(owner))
    assigned = re.compile(rf"self\.{re.escape(name)}\b\s*(:[^=]*)?=(?!=)")
    for source_of in sources:
        try:
            if assigned.search(inspect.getsource(source_of)):
                return True
        except (OSError, TypeError):
            continue
    return False


@pytest.mark.parametrize("private", SURFACE, ids=lambda p: f"{p.owner}.{p.name}")
def test_each_private_part_still_exists_with_the_signature_relied_on(private: Private) -> None:
    owner: Any = _checker().resolve(private.owner)
    assert owner is not None, f"{private.owner} cannot be imported any more"
    assert _has(owner, private.name), f"{private.owner} has no {private.name} any more"
    if private.params is not None:
        # Ray adds `_ray_trace_ctx` to every method of a class once the class has been made
        # an actor in this process (an earlier test's env runner): not the class's own.
        found = tuple(
            p
            for p in inspect.signature(getattr(owner, private.name)).parameters
            if p != "_ray_trace_ctx"
        )
        assert found == private.params, f"{private.owner}.{private.name}{found}"


def test_every_private_name_the_allowed_modules_use_is_listed() -> None:
    checker = _checker()
    package = ROOT / "workbench"
    listed = {p.name for p in SURFACE} | {f"{p.owner}.{p.name}" for p in SURFACE}
    listed |= {p.owner for p in SURFACE}  # a private module itself
    unlisted = set()
    for module in sorted(package.rglob("*.py")):
        relative = module.relative_to(package).as_posix()
        if not checker.allowed(relative):
            continue
        for finding in checker.module_findings(module.read_text(), relative):
            if finding.name not in listed:
                unlisted.add(str(finding))
    assert not unlisted, "add these to workbench/tune_ext/ray_surface.py:\n" + "\n".join(
        sorted(unlisted)
    )


def test_the_package_keeps_rays_internals_in_the_allowed_modules() -> None:
    assert _checker().check(ROOT / "workbench") == []


CASES = {
    "a private Ray import": "from ray._private.utils import get_num_cpus\n",
    "a private name of a public module": (
        "from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint\n"
    ),
    "a private attribute of a Ray object": (
        "def f(controller):\n    return controller._actor_cache\n"
    ),
    "getattr of a private name": 'def f(node):\n    return getattr(node, "_global_node", None)\n',
    "a mixin reading what another class defines": (
        "class M:\n    def f(self):\n        return self._trial_state\n"
    ),
    "an override of Ray's private method": (
        "from ray.tune.schedulers import PopulationBasedTraining\n\n"
        "class P(PopulationBasedTraining):\n"
        "    def _exploit(self, tune_controller, trial, trial_to_clone):\n"
        "        return None\n"
    ),
}


@pytest.mark.parametrize("source", CASES.values(), ids=list(CASES))
def test_make_lint_fails_on_rays_internals_outside_the_allowed_modules(
    tmp_path: Path, source: str
) -> None:
    package = tmp_path / "workbench"
    (package / "run").mkdir(parents=True)
    (package / "tune_ext").mkdir()
    (package / "run" / "added.py").write_text(source)
    # The same code is allowed in the wing that holds Ray's internals.
    (package / "tune_ext" / "added.py").write_text(source)
    done = subprocess.run(
        [sys.executable, str(TOOL), str(package)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert done.stdout.startswith("workbench/run/added.py:"), done.stdout
    assert "tune_ext" not in done.stdout
    assert "move them into workbench/tune_ext" in done.stderr


def test_own_private_attributes_and_marked_reads_of_other_libraries_pass(tmp_path: Path) -> None:
    package = tmp_path / "workbench"
    (package / "run").mkdir(parents=True)
    (package / "run" / "own.py").write_text(
        "import logging\n\n"
        "class Own:\n"
        "    def __init__(self):\n"
        "        self._count = 0\n\n"
        "    def more(self):\n"
        "        self._count += 1\n"
        "        return self._count\n\n"
        "class Child(Own):\n"
        "    def again(self):\n"
        "        return self._count\n\n"
        'X = getattr(logging, "_lock", None)  # not Ray: the logging module\'s\n'
    )
    assert _checker().check(package) == []
