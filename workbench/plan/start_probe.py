"""A trial process's start, measured here: the CPU seconds a fresh Python process takes to
import the workbench, torch and RLlib and build this experiment's algorithm, what each trial
process does before its first ``train()``.

The population forecast prices a trial's start from it (``workbench.plan.population``), so
that the start moves with the machine's speed and with the experiment (a simulator slow to
build, a large model) as the probe's ``train()`` does; the documented constant is one
machine's on one day."""

from __future__ import annotations

import os
import pickle
import statistics
import subprocess
import sys
from pathlib import Path

from workbench.experiment.defaults import Defaults
from workbench.experiment.schema import Experiment

# Run in a fresh interpreter: the experiment and its defaults come pickled on stdin; the
# process's own CPU seconds (user and system) once the algorithm is built go to stdout.
_MEASURE = """
import pickle, resource, sys
experiment, defaults = pickle.load(sys.stdin.buffer)
from workbench.trial import eager_torch
from workbench.trial.config import build_config
# One process: the main one, as each of a trial's processes starts (env runners and
# learners are processes of their own, each its own start).
config = (
    build_config(experiment, defaults)
    .env_runners(num_env_runners=0)
    .learners(num_learners=0, num_gpus_per_learner=0)
)
eager_torch.install()  # as a trial process does before it builds its algorithm
algo = config.build_algo()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(usage.ru_utime + usage.ru_stime)
algo.stop()
"""

# Far longer than a start on a slow day here (about 15 s of wall time), short enough not to
# hang a plan.
_TIMEOUT_S = 180.0


class StartProbeError(RuntimeError):
    """The measuring process failed or did not finish."""


def start_cpu_s(experiment: Experiment, defaults: Defaults, *, runs: int = 1) -> float:
    """CPU seconds of a fresh process that builds this experiment's algorithm (the median
    of ``runs``, one after another). Its Ray is a local one of its own, as the fitted
    constants' measurement had, whatever cluster RAY_ADDRESS names."""
    payload = pickle.dumps((experiment, defaults))
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "RAY_ADDRESS": "", "PYTHONPATH": path}
    times = []
    for _ in range(runs):
        try:
            out = subprocess.run(
                [sys.executable, "-c", _MEASURE],
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
        times.append(float(out.stdout.split()[-1]))
    return statistics.median(times)
