"""Where the modules of the flat package (before the wings) went, for old pickles.

A results folder written before the reorganisation (or before Tune's subclasses moved
from ``run`` to ``tune_ext``) holds pickles that name classes by
their old module (``workbench.fast_runner.FastEnvRunner`` in every checkpoint's RLlib
config, ``workbench.stopping.RulesStopper`` and the callbacks in ``tuner.pkl``).
Importing ``workbench`` installs a finder that answers those old names with a module
that looks the attribute up in its new homes, so such a folder still resumes, evaluates
and exports. Nothing in the package imports the old names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any

MOVED: dict[str, tuple[str, ...]] = {
    "workbench.algorithm_config": ("workbench.trial.config",),
    "workbench.algorithms": ("workbench.experiment.algorithms",),
    "workbench.checkpoints": ("workbench.tune_ext.checkpoints",),
    "workbench.defaults": ("workbench.experiment.defaults",),
    "workbench.diagnosis": ("workbench.trial.time_split", "workbench.analysis.diagnosis"),
    "workbench.environments": ("workbench.experiment.environments",),
    "workbench.evaluate": (
        "workbench.policy.checkpoint",
        "workbench.policy.evaluate",
        "workbench.policy.locate",
    ),
    "workbench.export": ("workbench.policy.export",),
    "workbench.fast_runner": ("workbench.trial.fast_runner",),
    "workbench.inspection": (
        "workbench.analysis.populations",
        "workbench.analysis.leaderboards",
        "workbench.analysis.histories",
        "workbench.tracking.store",
    ),
    "workbench.launch": (
        "workbench.trial.trainable",
        "workbench.run.launch",
        "workbench.run.summary",
        "workbench.run.ray_session",
    ),
    "workbench.lineage": ("workbench.analysis.lineage",),
    "workbench.plan": ("workbench.plan.capacity",),
    "workbench.plots": ("workbench.analysis.plots",),
    "workbench.progress": ("workbench.run.progress",),
    "workbench.replay": ("workbench.tune_ext.replay", "workbench.analysis.schedule"),
    "workbench.resolve": ("workbench.experiment.resolve",),
    "workbench.resources": ("workbench.plan.resources",),
    "workbench.results_folder": ("workbench.run.results_folder",),
    "workbench.rllib_callbacks": ("workbench.trial.callbacks",),
    "workbench.schedulers": (
        "workbench.run.schedulers",
        "workbench.tune_ext.pbt",
        "workbench.tune_ext.scheduler_state",
    ),
    "workbench.schema": ("workbench.experiment.schema",),
    "workbench.search_space": ("workbench.experiment.search_space",),
    "workbench.stopping": ("workbench.run.stopping",),
    "workbench.timeline": ("workbench.analysis.timeline",),
    "workbench.tracking": ("workbench.tracking.callback", "workbench.tracking.writer"),
    "workbench.ui": ("workbench.analysis.ui", "workbench.tracking.store"),
    # The modules of Tune's subclasses and patches, from run/ to tune_ext/.
    "workbench.run.checkpoints": ("workbench.tune_ext.checkpoints",),
    "workbench.run.optuna_study": ("workbench.tune_ext.optuna_study",),
    "workbench.run.replay": ("workbench.tune_ext.replay",),
    "workbench.run.result_files": ("workbench.tune_ext.result_files",),
    "workbench.run.scheduler_state": ("workbench.tune_ext.scheduler_state",),
    "workbench.run.state_sync": ("workbench.tune_ext.state_sync",),
}
# Old names that are packages now: only a missing attribute is looked up in the parts.
_PACKAGES_NOW = {"workbench.plan", "workbench.tracking"}


class _OldModule(types.ModuleType):
    def __init__(self, name: str, homes: Sequence[str]) -> None:
        super().__init__(name, f"Moved: {', '.join(homes)}")
        self._homes = tuple(homes)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        for home in self._homes:
            module = importlib.import_module(home)
            if hasattr(module, attr):
                return getattr(module, attr)
        raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")


class _Loader(importlib.abc.Loader):
    def __init__(self, homes: Sequence[str]) -> None:
        self.homes = homes

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _OldModule(spec.name, self.homes)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        homes = MOVED.get(fullname)
        if homes is None or fullname in _PACKAGES_NOW:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(homes))


def old_attribute(package: str, attr: str) -> Any:
    """An attribute a pickle asks of an old module that is a package now (``plan``,
    ``tracking``): looked up in the modules its contents went to."""
    for home in MOVED.get(package, ()):
        module = importlib.import_module(home)
        if hasattr(module, attr):
            return getattr(module, attr)
    raise AttributeError(f"module {package!r} has no attribute {attr!r}")


def install() -> None:
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
