"""A trial process measured here: the CPU seconds a fresh Python process takes to import
the workbench, torch and RLlib and build this experiment's algorithm (what each trial
process does before its first ``train()``), and, with a crowd, what one ``train()`` costs
alone and among others training on this machine's cores, and what the short evaluations
a trial runs inside its ``train()`` cost (``workbench.plan.probe_child`` measures; this
module starts it and reads it).

The population forecast prices a trial's start, a crowded ``train()`` and the evaluations
from it (``workbench.plan.population``), so that they move with the machine (its speed,
how its cores and caches share out among processes) and with the experiment (a simulator
slow to build, a large model) as the probe's ``train()`` does; the documented constants
are one machine's on one day."""

from __future__ import annotations

import json
import math
import os
import pickle
import statistics
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from workbench.experiment.defaults import Defaults
from workbench.experiment.schema import Experiment
from workbench.plan.throughput import Throughput

# Far longer than a start on a slow day here (about 15 s of wall time) and a crowd of
# trial processes training (about a minute), short enough not to hang a plan.
_TIMEOUT_S = 300.0
# The crowd a train() is measured among: two processes a core (so that each core is
# time-shared, as a population's crowded cores are), at most this many, and at most one
# a GiB of the memory available now (a trial process of the main experiment is 0.43 GB).
_CROWD_PER_CORE = 2
_MAX_CROWD = 64
_GIB = 1 << 30


class StartProbeError(RuntimeError):
    """The measuring process failed or did not finish."""


@dataclass(frozen=True)
class ProcessProbe:
    """One trial process of this experiment on this machine (CPU seconds)."""

    start_cpu_s: float
    # A train() alone, and among ``crowd`` processes training at once on ``cores`` cores.
    train_cpu_s: float | None = None
    crowd_train_cpu_s: float | None = None
    crowd: int = 0
    cores: int = 0
    # One step of the short evaluation's vector env (s), and the episode length the
    # forecast prices it at: the env's step limit (``step_limited``), else the longest
    # episode the probe's untrained policy played.
    eval_step_s: float | None = None
    eval_steps: int = 0
    step_limited: bool = False

    @property
    def per_core(self) -> float:
        """The crowd's trial processes a core."""
        return self.crowd / self.cores if self.cores else 0.0

    @property
    def crowd_ratio(self) -> float | None:
        """A train()'s CPU among the crowd over its CPU alone."""
        if not self.train_cpu_s or self.crowd_train_cpu_s is None:
            return None
        return self.crowd_train_cpu_s / self.train_cpu_s


def crowd_size(cores: int, available_bytes: int | None) -> int:
    """The trial processes the probe measures a train() among on ``cores`` cores."""
    crowd = min(_CROWD_PER_CORE * max(cores, 1), _MAX_CROWD)
    if available_bytes is not None:
        crowd = min(crowd, max(available_bytes // _GIB, 2))
    return max(crowd, 2)


def _available_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _run(experiment: Experiment, defaults: Defaults, crowd: int) -> dict[str, object]:
    payload = pickle.dumps((experiment, defaults, crowd))
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    # Its Ray is a local one of its own, as the fitted constants' measurement had, whatever
    # cluster RAY_ADDRESS names.
    env = {**os.environ, "RAY_ADDRESS": "", "PYTHONPATH": path}
    command = "from workbench.plan.probe_child import main; main()"
    try:
        out = subprocess.run(
            [sys.executable, "-c", command],
            input=payload,
            capture_output=True,
            check=True,
            env=env,
            timeout=_TIMEOUT_S,
        )
    except subprocess.CalledProcessError as err:
        last = err.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise StartProbeError(f"the start probe failed: {last[0]}") from err
    except subprocess.TimeoutExpired as err:
        raise StartProbeError(f"the start probe took over {_TIMEOUT_S:g} s") from err
    lines = out.stdout.decode(errors="replace").strip().splitlines()
    try:
        figures = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError) as err:
        raise StartProbeError("the start probe wrote no figures") from err
    if not isinstance(figures, dict):
        raise StartProbeError("the start probe wrote no figures")
    return figures


def start_cpu_s(experiment: Experiment, defaults: Defaults, *, runs: int = 1) -> float:
    """CPU seconds of a fresh process that builds this experiment's algorithm (the median
    of ``runs``, one after another)."""
    return statistics.median(
        float(_run(experiment, defaults, 0)["start_cpu_s"])  # type: ignore[arg-type]
        for _ in range(runs)
    )


def probe_process(
    experiment: Experiment, defaults: Defaults, *, crowd: int | None = None
) -> ProcessProbe:
    """A fresh trial process's start, its train() alone and among a crowd (``crowd``
    processes; None: ``crowd_size`` of this machine), and a short evaluation's step."""
    cores = os.cpu_count() or 1
    size = crowd_size(cores, _available_bytes()) if crowd is None else crowd
    figures = _run(experiment, defaults, size)

    def number(key: str) -> float | None:
        value = figures.get(key)
        return float(value) if isinstance(value, int | float) and math.isfinite(value) else None

    limit = number("step_limit")
    longest = number("eval_longest") or 0.0
    return ProcessProbe(
        start_cpu_s=float(number("start_cpu_s") or 0.0),
        train_cpu_s=number("train_cpu_s"),
        crowd_train_cpu_s=number("crowd_train_cpu_s"),
        crowd=int(number("crowd") or 0),
        cores=cores,
        eval_step_s=number("eval_step_s"),
        eval_steps=int(limit if limit else longest),
        step_limited=bool(limit),
    )


def evaluation_cpu_s(probe: ProcessProbe, experiment: Experiment) -> float:
    """The short evaluations' CPU seconds a train() (one every ``evaluation.every`` calls,
    ``short_episodes`` episodes in batches of the trials' largest vector env, each batch
    ``probe.eval_steps`` steps of its vector env)."""
    from workbench.trial.score import MAX_ENVS

    section = experiment.evaluation
    if probe.eval_step_s is None or section.every <= 0:
        return 0.0
    batches = math.ceil(section.short_episodes / MAX_ENVS)
    return batches * probe.eval_steps * probe.eval_step_s / section.every


def with_process(rate: Throughput, probe: ProcessProbe, experiment: Experiment) -> Throughput:
    """The plan's throughput figures with what the process probe measured."""
    ratio = probe.crowd_ratio
    return replace(
        rate,
        start_cpu_s=probe.start_cpu_s,
        crowd=(probe.per_core, ratio) if ratio is not None and probe.per_core > 0 else None,
        evaluation_s=evaluation_cpu_s(probe, experiment),
    )
