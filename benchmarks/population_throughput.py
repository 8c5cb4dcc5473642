"""Population throughput: a whole population's env steps per second, learning included, on
this machine, side by side with its parts, with Stable-Baselines3 run as N processes, and with
Tune + RLlib on their defaults.

Usage::

    .venv/bin/python benchmarks/population_throughput.py                      # both tasks, 4 and 8
    .venv/bin/python benchmarks/population_throughput.py --task lunarlander --populations 4 \\
        --rounds 3 --arms parts,workbench
    .venv/bin/python benchmarks/population_throughput.py --quick   # a smoke run (the test)

Method. One local Ray of ``--cpus`` CPUs for the whole script; per task and population the arms
run in ``--rounds`` interleaved rounds (each arm once per round, the order alternating):

* **parts**: the two things an iteration cannot do without, alone, in a subprocess pinned to
  one CPU with one torch thread: the task's vector env (the experiment's env and number of
  envs, the env class its trials get) stepping one train batch of env steps with random
  actions; and the learner's update loop (the trial's own learner class, networks, epochs and
  minibatch) on one train batch the trial's runner sampled. The **ceiling** is
  ``cpus x batch / (env s + learner s)``: every core stepping and learning, nothing else
  (no policy inference, no Ray, no Tune).
* **workbench**: ``workbench.run.launch.run`` of the task's experiment file as shipped
  (its scheduler, checkpoints, MLflow tracking, the progress table), a population of N at
  ``cpus / N`` CPUs a trial (so all run at once), ``--iterations`` iterations each, with
  the short evaluations the experiment makes (their time counts, their env steps do not)
  but not the final confirmation of its result.
* **workbench_envpool** (tasks with an EnvPool port, where EnvPool is installed): the same
  with ``env.id: envpool/<task>``; the parts then also time EnvPool's env alone.
* **rllib**: ``tune.Tuner`` of the same RLlib config with RLlib's own env runner, learner and
  default networks (``defaults: rllib``, ``env_runner: rllib``, ``learner: rllib``), no
  scheduler, Tune's default checkpointing, the same resources and iterations.
* **sb3**: N processes of ``benchmarks/sb3_member.py`` (SB3 PPO with RL Zoo's settings for
  the task: what a user would run without the workbench), started together in RL Zoo's
  virtualenv (``--zoo-python``), each for ``--sb3-steps`` env steps (RL Zoo's MountainCar
  entry updates 10 epochs every 8 steps, so its steps are capped lower). Skipped with a
  note when that virtualenv is missing.

Figures: the population's env steps per second, ``env steps sampled / wall``, where the wall
is ``fit()`` for the workbench and Tune (trial processes starting included) and the processes'
launch to the last exit for SB3 (interpreter start and imports included); the share of the
trials' slot time outside ``train()`` (``1 - sum(time_this_iter_s) / (N x fit wall)``); and the
workbench's per-iteration shares from ``workbench diagnose`` (sampling, learner, weight sync,
the rest). Each is median [min-max] over rounds; the ratios use the medians.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):  # run as a file: python benchmarks/population_throughput.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import (
    ROOT,
    FitWindow,
    command_line,
    cpu_model,
    interleaved,
    number_at,
    outside_train_split,
    pin_to_one_cpu,
    read_trials,
    spread,
    timed_launch_run,
)

ARMS = ("parts", "workbench", "workbench_envpool", "rllib", "sb3")
ZOO_PYTHON = ROOT / ".venv-zoo" / "bin" / "python"


@dataclass(frozen=True)
class Task:
    experiment: Path
    gym_id: str  # the same task in Gymnasium, for SB3
    iterations: int  # per trial, by default
    sb3_steps: int  # per SB3 member, by default
    envpool_id: str | None = None  # its EnvPool port, for the workbench_envpool arm


TASKS = {
    "lunarlander": Task(
        ROOT / "experiments" / "lunarlander_pb2.yaml",
        "LunarLanderContinuous-v3",
        6,
        65_536,
        "envpool/LunarLanderContinuous-v3",
    ),
    "mountaincar": Task(
        ROOT / "experiments" / "mountaincar_continuous_pbt.yaml",
        "MountainCarContinuous-v0",
        24,
        8_192,
    ),
}


# --- the experiment as each arm runs it --------------------------------------------------------


def experiment_data(
    task: Task,
    population: int,
    iterations: int,
    cpus: int,
    folder: Path,
    name: str,
    env_id: str | None = None,
) -> dict[str, Any]:
    data = yaml.safe_load(task.experiment.read_text())
    if env_id is not None:
        data["env"]["id"] = env_id
    per_trial = cpus / population
    data.update(
        name=name,
        population=population,
        storage=str(folder),
        stop={"iterations": iterations},
    )
    # The short evaluations the population ranks and keeps candidates by stay as shipped
    # (their time is in the wall, their env steps are not counted); the final confirmation
    # of the result, a one-off at the end, is left out.
    data["evaluation"] = {**(data.get("evaluation") or {}), "at_end": "none"}
    data["resources"].update(cpus_main=per_trial / 2, cpus_per_learner=per_trial / 2)
    data["search_space"]["file"] = str(ROOT / "search_spaces" / data["search_space"]["file"])
    scheduler = data.get("scheduler") or {}
    if "quantile_fraction" in scheduler:  # at least one member in the bottom quantile
        wanted = max(scheduler["quantile_fraction"], 1 / population)
        scheduler["quantile_fraction"] = min(0.5, wanted)
    return data


def rllib_data(data: dict[str, Any]) -> dict[str, Any]:
    """The experiment on RLlib's own env runner, learner and default networks."""
    data = {**data, "defaults": "rllib", "env_runner": "rllib", "learner": "rllib"}
    data.pop("model", None)
    return data


def resolved_experiment(data: dict[str, Any], folder: Path) -> Any:
    from workbench.experiment.resolve import load_and_resolve

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_and_resolve(path)


def population_figures(trials_dir: Path, fit: FitWindow, population: int) -> dict[str, float]:
    by_trial = read_trials(trials_dir)
    trials = list(by_trial.values())
    steps = sum(
        number_at(r, "env_runners", "num_env_steps_sampled") or 0.0 for rows in trials for r in rows
    )
    train_s = sum(float(r.get("time_this_iter_s", 0.0)) for rows in trials for r in rows)
    figures = {
        "wall_s": fit.seconds,
        "env_steps": steps,
        "rate": steps / fit.seconds,
        "outside": 1.0 - train_s / (population * fit.seconds),
        "iterations": float(sum(len(rows) for rows in trials)),
    }
    if len(by_trial) == population:  # every trial ran from the start of fit() to its end
        figures.update(outside_train_split(by_trial, fit))
    return figures


# --- the arms ----------------------------------------------------------------------------------


def run_parts(args: argparse.Namespace, task_name: str, folder: Path) -> dict[str, float]:
    """The parts, in a fresh process pinned to one CPU (`parts_main`)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--parts-of", task_name]
    command += ["--parts-folder", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the parts of {task_name} failed:\n{done.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["ceiling"] = args.cpus * figures["batch"] / (figures["env_s"] + figures["learner_s"])
    if figures.get("envpool_s"):
        envpool_s = figures["envpool_s"]
        figures["envpool_rate"] = figures["batch"] / envpool_s
        figures["ceiling_envpool"] = (
            args.cpus * figures["batch"] / (envpool_s + figures["learner_s"])
        )
    else:
        figures.pop("envpool_s", None)
    return figures


def _env_seconds(env: Any, steps: int) -> float:
    """Seconds for `steps` vector steps with random actions (after a warm-up)."""
    env.reset(seed=0)
    env.action_space.seed(0)
    pool = [env.action_space.sample() for _ in range(64)]
    for i in range(200):
        env.step(pool[i % 64])
    start = time.perf_counter()
    for i in range(steps):
        env.step(pool[i % 64])
    seconds = time.perf_counter() - start
    env.close()
    return seconds


def parts_main(task_name: str, folder: Path) -> int:
    """Times the env alone and the learner alone on one train batch, on one CPU."""
    import copy

    import torch

    pin_to_one_cpu(default="last")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

    from workbench.trial.config import algorithm_config, make_env, vectorize_mode

    task = TASKS[task_name]
    resolved = resolved_experiment(experiment_data(task, 2, 1, 1, folder, "parts"), folder)
    exp = resolved.experiment
    config = algorithm_config(resolved.experiment, resolved.defaults)
    batch = int(config.train_batch_size_per_learner)
    n = exp.resources.env_runners.envs_per_runner
    env_config = dict(exp.env.config)
    if vectorize_mode(resolved.experiment) == "vector_entry_point":
        env = make_env(exp.env.id, {**env_config, "num_envs": n})
    else:
        import gymnasium as gym

        env = gym.make_vec(exp.env.id, num_envs=n, vectorization_mode="sync", **env_config)
    env_s = _env_seconds(env, batch // n)
    envpool_s = None
    if task.envpool_id is not None:
        from workbench.experiment import envpool_envs

        if envpool_envs.register():
            envpool_s = _env_seconds(make_env(task.envpool_id, {"num_envs": n}), batch // n)

    config.env_runners(num_env_runners=0)
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    hiddens = config.model_config.get("fcnet_hiddens") or DefaultModelConfig().fcnet_hiddens
    algo = config.build_algo()
    episodes = algo.env_runner.sample(num_timesteps=batch, explore=True)
    learner = algo.learner_group._learner
    times = []
    for _ in range(3):
        data = copy.deepcopy(episodes)  # the learner connectors extend episodes in place
        start = time.perf_counter()
        learner.update(
            episodes=data,
            timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: batch},
            num_epochs=int(config.num_epochs),
            minibatch_size=int(config.minibatch_size),
            shuffle_batch_per_epoch=True,
        )
        times.append(time.perf_counter() - start)
    algo.stop()
    print(
        json.dumps(
            {
                "batch": batch,
                "env_s": env_s,
                "learner_s": statistics.median(times),
                "learner": type(learner).__name__,
                "network": "x".join(map(str, hiddens)),
                "env_rate": batch / env_s,
                "envpool_s": envpool_s,
            }
        )
    )
    return 0


def run_workbench(
    args: argparse.Namespace,
    task: Task,
    population: int,
    folder: Path,
    env_id: str | None = None,
) -> dict[str, float]:
    from workbench.analysis.diagnosis import diagnose_target

    data = experiment_data(
        task, population, args.iterations, args.cpus, folder, "workbench", env_id
    )
    resolved = resolved_experiment(data, folder)
    summary, fit = timed_launch_run(resolved)
    if summary.errors:
        raise SystemExit(f"workbench population: {summary.errors} trials errored")
    figures = population_figures(resolved.results_dir, fit, population)
    found = diagnose_target(str(resolved.results_dir))
    report = found.population_report or found.reports[0]
    split = report.split
    if split.iteration_s > 0:
        figures.update(
            sampling=split.sampling_fraction,
            learner=split.learner_fraction,
            sync=split.sync_fraction,
            rest=split.rest_fraction,
        )
    return figures


def run_rllib(
    args: argparse.Namespace, task: Task, population: int, folder: Path
) -> dict[str, float]:
    from ray import tune

    from workbench.trial.config import algorithm_config, param_space

    data = rllib_data(
        experiment_data(task, population, args.iterations, args.cpus, folder, "rllib")
    )
    resolved = resolved_experiment(data, folder)
    config = algorithm_config(resolved.experiment, resolved.defaults)
    tuner = tune.Tuner(
        config.algo_class,
        param_space=param_space(resolved.tune_space, config),
        tune_config=tune.TuneConfig(num_samples=population),
        run_config=tune.RunConfig(
            name="rllib",
            storage_path=str(folder / "tune_results"),
            stop={"training_iteration": args.iterations},
            verbose=0,
        ),
    )
    start = time.perf_counter()
    results = tuner.fit()
    fit = FitWindow(seconds=time.perf_counter() - start, ended_at=time.time())
    if results.errors:
        raise SystemExit(f"Tune + RLlib population: {len(results.errors)} trials errored")
    return population_figures(folder / "tune_results" / "rllib", fit, population)


def run_sb3(
    args: argparse.Namespace, task: Task, population: int, folder: Path
) -> dict[str, float]:
    steps = args.sb3_steps or task.sb3_steps
    member = Path(__file__).resolve().parent / "sb3_member.py"
    start = time.perf_counter()
    command = [str(args.zoo_python), str(member), "--env", task.gym_id, "--steps", str(steps)]
    processes = [
        subprocess.Popen(
            [*command, "--seed", str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for seed in range(population)
    ]
    outputs = [p.communicate()[0] for p in processes]
    wall = time.perf_counter() - start
    if any(p.returncode for p in processes):
        raise SystemExit(f"an SB3 member failed: {[p.returncode for p in processes]}")
    members = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    total = float(sum(m["env_steps"] for m in members))
    learn = max(m["learn_s"] for m in members)
    return {"wall_s": wall, "env_steps": total, "rate": total / wall, "learn_rate": total / learn}


# --- the report --------------------------------------------------------------------------------


def _median(runs: list[dict[str, float]], key: str) -> float:
    values = [r[key] for r in runs if key in r]
    return statistics.median(values) if values else float("nan")


def report(task_name: str, population: int, runs: dict[str, list[dict[str, float]]]) -> None:
    print(f"\n{task_name}, population {population}: env steps per second of the population")
    print(f"| {'arm':<30} | {'env steps/s':>26} | {'outside train()':>22} | {'wall s':>7} |")
    print(f"|{'-' * 32}|{'-' * 28}|{'-' * 24}|{'-' * 9}|")
    parts = runs.get("parts", [])
    if parts:
        rates = [p["ceiling"] for p in parts]
        label = f"parts' ceiling ({parts[0]['network']})"
        print(f"| {label:<30} | {spread(rates, '.0f'):>26} | {'-':>22} | {'-':>7} |")
        envs = [p["env_rate"] for p in parts]
        label = "  env alone, one core"
        print(f"| {label:<30} | {spread(envs, '.0f'):>26} | {'-':>22} | {'-':>7} |")
        learn = [p["batch"] / p["learner_s"] for p in parts]
        label = f"  learner alone, one core ({parts[0]['learner'][:8]})"
        print(f"| {label:<30} | {spread(learn, '.0f'):>26} | {'-':>22} | {'-':>7} |")
        if "ceiling_envpool" in parts[0]:
            rates = [p["ceiling_envpool"] for p in parts]
            label = "parts' ceiling with EnvPool"
            print(f"| {label:<30} | {spread(rates, '.0f'):>26} | {'-':>22} | {'-':>7} |")
            envs = [p["envpool_rate"] for p in parts]
            label = "  EnvPool env alone, one core"
            print(f"| {label:<30} | {spread(envs, '.0f'):>26} | {'-':>22} | {'-':>7} |")
    names = {
        "workbench": "workbench",
        "workbench_envpool": "workbench, EnvPool's env",
        "rllib": "Tune + RLlib defaults",
        "sb3": "SB3 + RL Zoo, N processes",
    }
    for arm, label in names.items():
        figures = runs.get(arm, [])
        if not figures:
            continue
        outside = (
            spread([100 * f["outside"] for f in figures], ".1f", "%")
            if "outside" in figures[0]
            else "-"
        )
        wall = statistics.median(f["wall_s"] for f in figures)
        rates = [f["rate"] for f in figures]
        print(f"| {label:<30} | {spread(rates, '.0f'):>26} | {outside:>22} | {wall:>7.0f} |")
    anchors = (
        ("parts", "ceiling", "the parts' ceiling"),
        ("parts", "ceiling_envpool", "the ceiling with EnvPool"),
        ("rllib", "rate", "Tune + RLlib"),
        ("sb3", "rate", "SB3"),
    )
    for ours in ("workbench", "workbench_envpool"):
        wb = _median(runs.get(ours, []), "rate")
        lines = []
        for arm, key, label in anchors:
            other = _median(runs.get(arm, []), key)
            if other == other and wb == wb:
                lines.append(f"{wb / other:.2f}x {label}")
        if lines:
            print(f"{ours}: " + ", ".join(lines) + " (medians)")
    for arm in ("workbench", "rllib"):
        split = [f for f in runs.get(arm, []) if "outside_before" in f]
        if split:
            cells = ", ".join(
                f"{label} {100 * _median(split, key):.1f}%"
                for key, label in (
                    ("outside_before", "before the first result"),
                    ("outside_between", "between results"),
                    ("outside_after", "after the last"),
                )
            )
            print(f"{names[arm]}, outside train(): {cells} (medians, of the slot time)")
    shares = [f for f in runs.get("workbench", []) if "sampling" in f]
    if shares:
        cells = ", ".join(
            f"{key} {100 * _median(shares, key):.0f}%"
            for key in ("sampling", "learner", "sync", "rest")
        )
        print(f"workbench iterations (workbench diagnose, steady iterations): {cells}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=[*TASKS, "all"], default="all")
    parser.add_argument("--populations", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=None, help="per trial (task default)")
    parser.add_argument("--sb3-steps", type=int, default=None, help="per SB3 member")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray")
    parser.add_argument("--zoo-python", type=Path, default=ZOO_PYTHON)
    parser.add_argument("--quick", action="store_true", help="a smoke run (the test)")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--parts-of", help=argparse.SUPPRESS)
    parser.add_argument("--parts-folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.parts_of:
        return parts_main(args.parts_of, args.parts_folder)
    arms = [a for a in args.arms.split(",") if a]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        parser.error(f"--arms: unknown {', '.join(unknown)}; valid: {', '.join(ARMS)}")
    if "workbench_envpool" in arms:
        from workbench.experiment import envpool_envs

        if not envpool_envs.installed():
            print(
                "workbench_envpool arm skipped: EnvPool is not installed "
                f"({envpool_envs.INSTALL_HINT})"
            )
            arms.remove("workbench_envpool")
    if "sb3" in arms and not args.zoo_python.exists():
        print(f"sb3 arm skipped: no {args.zoo_python} (make zoo-venv, and the box2d extra)")
        arms.remove("sb3")
    tasks = list(TASKS) if args.task == "all" else [args.task]
    if args.quick:
        args.rounds, args.populations, args.iterations, args.sb3_steps = 1, [2], 2, 2048

    warnings.filterwarnings("ignore")
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    import ray

    print("command:", command_line())
    now = datetime.datetime.now(datetime.timezone.utc)
    load = os.getloadavg()[0]
    print(
        f"{now:%Y-%m-%d %H:%M:%S} UTC; {os.cpu_count()} CPUs ({cpu_model()}), load average "
        f"{load:.1f} at the start; python {platform.python_version()}, ray {ray.__version__}"
    )
    folder = Path(tempfile.mkdtemp(prefix="population_throughput-"))
    figures: dict[str, Any] = {}
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    try:
        for task_name in tasks:
            task = TASKS[task_name]
            iterations = args.iterations or task.iterations
            for population in args.populations:
                sub = argparse.Namespace(**{**vars(args), "iterations": iterations})
                print(
                    f"\n{task_name}: population {population}, {iterations} iterations, "
                    f"{args.rounds} round(s) of {', '.join(arms)}",
                    flush=True,
                )

                def one(
                    arm: str,
                    task: Task = task,
                    population: int = population,
                    task_name: str = task_name,
                    sub: argparse.Namespace = sub,
                ) -> Any:
                    where = Path(tempfile.mkdtemp(prefix=f"{arm}-", dir=folder))
                    if arm == "parts":
                        return run_parts(args, task_name, where)
                    if arm == "workbench_envpool":
                        result = run_workbench(sub, task, population, where, task.envpool_id)
                    else:
                        run = {"workbench": run_workbench, "rllib": run_rllib, "sb3": run_sb3}
                        result = run[arm](sub, task, population, where)
                    print(f"  {arm}: {result['rate']:.0f} env steps/s", flush=True)
                    return result

                here = [a for a in arms if a != "workbench_envpool" or task.envpool_id]
                rounds = interleaved(args.rounds, here, one, alternate=True, label="round")
                runs = dict(zip(here, rounds, strict=True))
                report(task_name, population, runs)
                figures[f"{task_name}/{population}"] = runs
    finally:
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
