"""The score's window K: how far each choice of K is from the policy's true return, and what
the evaluation that confirms a stop costs.

One PPO trial of the main job (sim_ext CartPole-v1, its resources and small-env defaults,
fixed good hyperparameters instead of the searched ones), trained without Tune for
``--iterations`` iterations per seed. After every iteration the current policy is rolled out
over ``--truth-episodes`` fresh episodes, sampling its actions as training does: that mean
is the policy's true return at that iteration. For each K the score (the mean return of the
last K training episodes, carried across iterations) is compared with it:

* ``bias`` and ``sd``: the mean and standard deviation of score - truth over all iterations
  with a score (the lag of training episodes behind the policy, and the noise);
* ``rmse``: their root mean square (both count);
* ``rmse >= 400``: the same where the truth is at least 400 (where a stop at 475 is decided);
* ``iterations``: how many iterations the window spans on average there (the lag);
* ``raw`` is RLlib's per-iteration ``episode_return_mean`` for comparison.

Then the cost of the confirming evaluation: the trial's own rollout (deterministic, all
episodes at once on one C++ vector env) over 100 episodes of the final policy, timed in
``--rounds`` rounds per seed.

    python benchmarks/score_window.py [--seeds 0 1 2] [--iterations 40] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a file: python benchmarks/score_window.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import EXPERIMENT, command_line, median_min_max

WINDOWS = (4, 10, 20, 50, 100)
HYPERPARAMETERS = {"lr": 3e-4, "gamma": 0.99, "lambda_": 0.95, "num_epochs": 10}


def _algorithm(seed: int) -> Any:
    from workbench.experiment.loading import load_experiment
    from workbench.experiment.resolve import resolve
    from workbench.trial.config import build_config

    experiment = load_experiment(EXPERIMENT, [f"seed={seed}", "storage=/tmp/score_window"])
    resolved = resolve(experiment, EXPERIMENT, check_results=False)
    config = build_config(resolved.experiment, resolved.defaults)
    return config.training(**HYPERPARAMETERS).debugging(seed=seed).build_algo()


def _evaluate(algo: Any, episodes: int, *, deterministic: bool, seed: int) -> dict[str, float]:
    from workbench.trial.score import ScoreSettings, evaluate_module

    config = algo.config
    return evaluate_module(
        algo.get_module(),
        env_id=str(config.env),
        env_config=dict(config.env_config),
        normalize_actions=bool(config.normalize_actions),
        clip_actions=bool(config.clip_actions),
        settings=ScoreSettings(eval_episodes=episodes, deterministic=deterministic, eval_seed=seed),
    )


def run_seed(seed: int, iterations: int, truth_episodes: int, rounds: int) -> dict[str, Any]:
    from workbench.names import EVAL_RETURN_METRIC
    from workbench.trial.score import EVAL_TIME_METRIC, pop_returns

    algo = _algorithm(seed)
    rows = []
    try:
        for i in range(iterations):
            result = algo.train()
            returns = pop_returns(result)
            raw = result["env_runners"].get("episode_return_mean", math.nan)
            truth = _evaluate(algo, truth_episodes, deterministic=False, seed=10_000 * (i + 1))
            rows.append(
                {
                    "iteration": i + 1,
                    "returns": returns,
                    "raw": float(raw),
                    "truth": truth[EVAL_RETURN_METRIC],
                }
            )
            print(
                f"seed {seed} it {i + 1}: {len(returns)} episodes, raw {raw:.1f}, "
                f"truth {truth[EVAL_RETURN_METRIC]:.1f}",
                flush=True,
            )
        costs = []
        for _ in range(rounds):
            evaluation = _evaluate(algo, 100, deterministic=True, seed=seed)
            costs.append(evaluation[EVAL_TIME_METRIC])
        final = evaluation[EVAL_RETURN_METRIC]
    finally:
        algo.stop()
    return {"seed": seed, "rows": rows, "eval_seconds": costs, "final_eval": final}


def window_errors(rows: list[dict[str, Any]], k: int | None) -> dict[str, float]:
    """score - truth per iteration for window k (None: RLlib's per-iteration mean)."""
    window: list[tuple[int, float]] = []  # (iteration, return)
    errors, late, spans = [], [], []
    for row in rows:
        if k is None:
            score = row["raw"]
            span = 1.0
        else:
            window.extend((row["iteration"], r) for r in row["returns"])
            window = window[-k:]
            if not window:
                continue
            score = float(np.mean([r for _, r in window]))
            span = row["iteration"] - window[0][0] + 1.0
        if math.isnan(score):
            continue
        error = score - row["truth"]
        errors.append(error)
        if row["truth"] >= 400:
            late.append(error)
            spans.append(span)
    rms = lambda xs: float(np.sqrt(np.mean(np.square(xs)))) if xs else math.nan  # noqa: E731
    return {
        "bias": float(np.mean(errors)) if errors else math.nan,
        "sd": float(np.std(errors)) if errors else math.nan,
        "rmse": rms(errors),
        "rmse_late": rms(late),
        "span_late": float(np.mean(spans)) if spans else math.nan,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--truth-episodes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    started = time.time()
    runs = [run_seed(s, args.iterations, args.truth_episodes, args.rounds) for s in args.seeds]
    ray.shutdown()

    print(f"\n{command_line()}  ({time.time() - started:.0f} s)")
    print(
        "window | bias | sd | rmse (median (min-max) over seeds) | rmse where truth >= 400 | "
        "iterations spanned there"
    )
    table = {}
    for k in (None, *WINDOWS):
        per_seed = [window_errors(run["rows"], k) for run in runs]
        figures = {
            key: median_min_max([p[key] for p in per_seed if not math.isnan(p[key])] or [math.nan])
            for key in ("bias", "sd", "rmse", "rmse_late", "span_late")
        }
        table["raw" if k is None else str(k)] = figures

        def fmt(t: tuple[float, float, float]) -> str:
            return f"{t[0]:.1f} ({t[1]:.1f}-{t[2]:.1f})"

        name = "raw (RLlib)" if k is None else f"K={k}"
        print(
            f"{name:>11} | {fmt(figures['bias'])} | {fmt(figures['sd'])} | "
            f"{fmt(figures['rmse'])} | {fmt(figures['rmse_late'])} | "
            f"{fmt(figures['span_late'])}"
        )
    costs = [c for run in runs for c in run["eval_seconds"]]
    cost = median_min_max(costs)
    finals = [run["final_eval"] for run in runs]
    print(
        f"100-episode deterministic evaluation: {cost[0]:.3f} s median "
        f"(min {cost[1]:.3f}, max {cost[2]:.3f}) over {len(costs)} rounds; final policies "
        f"evaluated at {', '.join(f'{f:.1f}' for f in finals)}"
    )
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "table": table, "cost": cost}, indent=1))


if __name__ == "__main__":
    main()
