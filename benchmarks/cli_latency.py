"""How long the inspection commands take to answer, against MLflow's own CLI on one store.

Usage::

    .venv/bin/python benchmarks/cli_latency.py                 # 10 rounds
    .venv/bin/python benchmarks/cli_latency.py --rounds 3 --json figures.json

The store: an sqlite MLflow store in a temporary folder with one population of
``--trials`` trials (default 8) of ``--iterations`` results each (default 50: return,
score, env steps, a learning rate), a lineage artifact and the population's result,
written by MLflow's client as a run writes them. Each case is one command in a fresh
process, as a user types it (``workbench`` from this virtualenv, ``mlflow`` from it too),
its output discarded; the cases run interleaved, one after another in each round, so that
a disturbance of the machine hits all alike. Printed per case: median, min and max wall
seconds over the rounds, and the median as a fraction of ``mlflow runs list`` (the
anchor, in the same run). Targets (docs/benchmarks/cli-latency.md): ``runs``, ``show``
and ``lineage`` at most 1.5 s and at most half the anchor; ``validate`` at most 2 s.

``--run`` adds a two-trial, two-iteration ``workbench run`` (PPO on CartPole), and the same
run as ``sys.exit(main())`` instead of the ``workbench`` entry point, which skips tearing
the interpreter's modules down (``workbench.cli.main.entry``): "run (torn down)"; the
difference is what that exit saves. The inspection commands import too little for it
to show.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import command_line, interleaved, median_min_max  # noqa: E402

BIN = Path(sys.executable).parent
# The command as it was before `entry`: Python's whole exit, module teardown included.
TORN_DOWN = [
    sys.executable,
    "-c",
    "import sys; from workbench.cli.main import main; sys.exit(main())",
]
RUN_EXPERIMENT = """name: exit
algorithm: PPO
env: {id: sim_ext/CartPole-v1}
population: 2
search_space: {params: {lr: {loguniform: [1.0e-4, 3.0e-3]}}}
scheduler: {type: pbt, perturbation_interval: 2, quantile_fraction: 0.5, rank_on: score}
checkpoint: {frequency: 1}
training: {train_batch_size_per_learner: 256, minibatch_size: 128, num_epochs: 2}
stop: {iterations: 2}
evaluation: {at_end: none, every: 0}
"""
RUNS = ("run", "run (torn down)")  # the --run cases
TARGETS = {"runs": 1.5, "show": 1.5, "lineage": 1.5, "validate": 2.0}


def build_store(folder: Path, trials: int, iterations: int) -> str:
    """The store and its population, written with MLflow's client; its URI."""
    from tests.support.stores import new_store
    from workbench.names import EVAL_RETURN_METRIC, SCORE_METRIC, STEPS_METRIC

    store = new_store(folder)
    pop = store.population("bench", results_dir=folder / "bench")
    for t in range(trials):
        returns = [10.0 + t + i * 3.0 for i in range(iterations)]
        store.trial(
            pop,
            f"PPO_{t:05d}",
            returns=returns,
            metrics={
                SCORE_METRIC: returns,
                STEPS_METRIC: [4000.0 * (i + 1) for i in range(iterations)],
                "hp/lr": [1e-3 * (1 + t % 3)] * iterations,
                EVAL_RETURN_METRIC: [returns[-1]],
            },
            params={"lr": str(1e-3 * (1 + t % 3))},
        )
    records = [
        {
            "seq": i,
            "time": float(i),
            "target": f"abc_{(i % trials):05d}",
            "target_name": f"PPO_{(i % trials):05d}",
            "source": f"abc_{((i + 1) % trials):05d}",
            "source_name": f"PPO_{((i + 1) % trials):05d}",
            "target_iteration": 4 * (i + 1),
            "source_iteration": 4 * (i + 1),
            "old": {"lr": 1e-3},
            "new": {"lr": 2e-3},
        }
        for i in range(trials)
    ]
    store.lineage(pop, records)
    return store.uri


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--run", action="store_true", help="time a small `workbench run` too")
    args = parser.parse_args()
    print(command_line())
    with tempfile.TemporaryDirectory() as tmp:
        uri = build_store(Path(tmp) / "results", args.trials, args.iterations)
        experiment = "1"  # the store's first experiment after Default
        store = ["--store", uri]
        workbench = str(BIN / "workbench")
        cases = {
            "--help": [workbench, "--help"],
            "runs": [workbench, "runs", *store],
            "show": [workbench, "show", "PPO_00001", "--population", "bench", *store],
            "lineage": [workbench, "lineage", "bench", *store],
            "validate": [workbench, "validate", str(ROOT / "experiments" / "cartpole_pbt.yaml")],
            "mlflow runs list": [
                str(BIN / "mlflow"),
                "runs",
                "list",
                "--experiment-id",
                experiment,
            ],
        }
        if args.run:
            run_file = Path(tmp) / "exit.yaml"
            run_file.write_text(RUN_EXPERIMENT)
            run = ["run", str(run_file), "--set", f"storage={tmp}/runs"]
            cases[RUNS[0]] = [workbench, *run]
            cases[RUNS[1]] = [*TORN_DOWN, *run]
        env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
        run_env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        # What each answer must hold: a fast empty answer is not an answer.
        expected = {"runs": "bench", "show": "PPO_00001", "lineage": "exploits", "validate": "ok"}
        expected |= dict.fromkeys(RUNS, "Best trial")

        def measure(name: str) -> float:
            start = time.perf_counter()
            done = subprocess.run(
                cases[name],
                # A run's store is its own, beside its results: not the one measured.
                env=run_env if name in RUNS else env,
                cwd=tmp,
                capture_output=True,
                text=True,
                check=False,
            )
            took = time.perf_counter() - start
            if done.returncode != 0:
                raise SystemExit(f"{name} failed ({done.returncode}): {done.stderr[-2000:]}")
            if expected.get(name, "") not in done.stdout:
                raise SystemExit(f"{name} answered without {expected[name]!r}: {done.stdout}")
            return took

        names = list(cases)
        figures = dict(zip(names, interleaved(args.rounds, names, measure), strict=True))
    anchor = median_min_max(figures["mlflow runs list"])[0]
    print(f"{'command':<18} {'median s':>9} {'min':>6} {'max':>6} {'/ anchor':>9}  target")
    for name in names:
        median, low, high = median_min_max(figures[name])
        target = TARGETS.get(name)
        if target is None:
            verdict = "(the anchor)" if name == "mlflow runs list" else ""
        else:
            met = median <= target and (name == "validate" or median <= anchor / 2)
            half = "" if name == "validate" else " and <= half the anchor"
            verdict = f"<= {target:g} s{half}: {'met' if met else 'NOT met'}"
        print(f"{name:<18} {median:9.2f} {low:6.2f} {high:6.2f} {median / anchor:9.2f}  {verdict}")
    if args.json:
        args.json.write_text(json.dumps({"rounds": args.rounds, "seconds": figures}, indent=1))


if __name__ == "__main__":
    main()
