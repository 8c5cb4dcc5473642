"""The benchmark scripts still run (a tiny budget: this checks they work, not their figures)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from workbench.experiment.resolve import load_and_resolve

ROOT = Path(__file__).resolve().parents[1]


def test_env_throughput_runs_and_reports_every_case(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "env_throughput.py"),
            *("--rounds", "2", "--seconds", "0.02", "--sizes", "1,16"),
            *("--cases", "sim_view,sim_copy,sim_core,gym_vector,gym_single"),
            *("--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "gymnasium numpy-vectorized" in result.stdout
    figures = json.loads(out.read_text())
    assert figures, "no figures written"
    text = json.dumps(figures)
    for case in ("sim_view", "sim_copy", "sim_core", "gym_vector", "gym_single"):
        assert case in text


def test_mlflow_overhead_runs_and_reports_both_callbacks(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "mlflow_overhead.py"),
            *("--synthetic", "--rounds", "1", "--results", "20", "--results-ray", "2"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,  # whatever MLflow might write next to the working directory lands here
    )
    assert result.returncode == 0, result.stderr
    rows = {
        cells[0]: cells[1:]
        for line in result.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| case")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    ray = rows["Ray MLflowLoggerCallback"]
    workbench = rows["workbench end to end (to flush)"]
    assert ray[0] == "2" and workbench[0] == "20"  # results per round
    for row in (ray, workbench, rows["workbench on_trial_result (enqueue)"]):
        median_ms, calls_per_result = float(row[1]), float(row[4])
        assert median_ms > 0 and calls_per_result > 0
    assert re.search(r"^(PASS|FAIL): workbench end to end [\d.]+ ms/result", result.stdout, re.M)
    assert list(tmp_path.iterdir()) == []


def _table_rows(stdout: str) -> dict[str, list[str]]:
    """Markdown table rows by their first cell."""
    return {
        cells[0]: cells[1:]
        for line in stdout.splitlines()
        if line.startswith("| ") and not line.startswith("|--")
        for cells in [[c.strip() for c in line.strip().strip("|").split("|")]]
    }


@pytest.mark.slow
def test_tune_overhead_runs_and_reports_both_setups(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "tune_overhead.py"),
            "--quick",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = _table_rows(result.stdout)
    for label in (
        "train() (the anchor)",
        "exploit, new actor (Tune default)",
        "exploit, reused actor (workbench)",
        "workbench",
    ):
        assert label in rows, sorted(rows)
    assert "Tune defaults" in rows
    figures = json.loads(out.read_text())
    assert set(figures["populations"]) == {"workbench", "Tune defaults"}
    for runs in figures["populations"].values():
        # 2 trials x 2 iterations; a clone of a donor already at the stop reports none
        assert 2 <= runs[0]["iterations"] <= 4
        assert runs[0]["train_s"] > 0 and 0 <= runs[0]["outside"] < 1
    assert all(ms > 0 for ms in figures["exploits"]["new_actor"])
    assert all(ms > 0 for ms in figures["exploits"]["reset"])  # reset() returned True


@pytest.mark.slow
def test_time_to_target_runs_scheduler_arms(tmp_path: Path) -> None:
    # PB2 (the derived numeric space) and random search (the ASHA file turned FIFO):
    # the two arms whose experiment is not a file as it stands.
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "time_to_target.py"),
            *("--quick", "--arms", "pb2,random"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| 0 |")]
    assert [row.split("|")[2].strip() for row in rows] == ["pb2", "random"]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == "0"  # exit status
        assert cells[3] == "2"  # trials read back
        assert float(cells[7].replace(",", "")) > 0  # the population sampled
    assert "| arm | reached |" in result.stdout


def _benchmark(name: str) -> Any:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_time_to_target_scheduler_arms_share_one_budget(tmp_path: Path) -> None:
    ttt = _benchmark("time_to_target")
    full = {
        arm.name: load_and_resolve(
            arm.experiment, [*arm.overrides(3), f"storage={tmp_path}"], check_results=False
        )
        for arm in ttt.arms("schedulers")
    }
    resolved = {name: r.experiment for name, r in full.items()}
    assert list(resolved) == ["pbt", "pb2", "asha_optuna", "random"]
    kinds = {name: e.scheduler.type for name, e in resolved.items()}
    assert kinds == {"pbt": "pbt", "pb2": "pb2", "asha_optuna": "asha", "random": "fifo"}
    assert resolved["asha_optuna"].search.type == "optuna"
    assert resolved["asha_optuna"].search.seed == 3  # follows the run's seed
    assert resolved["random"].search.type == "random"
    assert resolved["random"].stop.iterations == resolved["asha_optuna"].scheduler.max_t
    assert resolved["random"].population == resolved["asha_optuna"].population
    for name, e in resolved.items():
        assert e.seed == 3, name
        assert e.stop.wall_time_s == 300 and e.stop.all_at_return, name
        assert e.stop.return_mean == 475, name
        assert e.resources == resolved["pbt"].resources, name
        assert e.algorithm == "PPO" and e.env.id == "sim_ext/CartPole-v1", name
        assert e.training == resolved["pbt"].training, name
    # Four trials at a time everywhere.
    assert resolved["pbt"].population == resolved["pb2"].population == 4
    assert resolved["asha_optuna"].max_concurrent == resolved["random"].max_concurrent == 4
    # PB2's space is PBT's without its choice block.
    spaces = {name: r.search_space for name, r in full.items()}
    assert set(spaces["pb2"]) == set(spaces["pbt"]) - {"minibatch_size"}
    assert all(spaces["pb2"][k] == spaces["pbt"][k] for k in spaces["pb2"])
    assert spaces["asha_optuna"] == spaces["random"] == spaces["pbt"]


def test_time_to_target_defaults_arms_are_before_and_after(tmp_path: Path) -> None:
    ttt = _benchmark("time_to_target")
    resolved = {
        arm.name: load_and_resolve(
            arm.experiment, [*arm.overrides(1), f"storage={tmp_path}"], check_results=False
        )
        for arm in ttt.arms("defaults")
    }
    assert list(resolved) == ["rllib", "workbench"]
    before, after = resolved["rllib"], resolved["workbench"]
    assert (before.experiment.env_runner, before.defaults.name) == ("rllib", "rllib")
    # The main experiment as it ships: the fast runner (auto) and the small-env defaults.
    assert (after.experiment.env_runner, after.defaults.name) == ("auto", "small_env")
    assert before.experiment.training == after.experiment.training
    assert before.search_space == after.search_space
    # The runner comparison keeps RLlib's defaults on both sides: the runner alone.
    runners = [a.sets for a in ttt.arms("runners")]
    assert all("defaults=rllib" in sets for sets in runners)


def test_time_to_target_reuse_arms_differ_only_in_actor_reuse(tmp_path: Path) -> None:
    ttt = _benchmark("time_to_target")
    resolved = {
        arm.name: load_and_resolve(
            arm.experiment, [*arm.overrides(1), f"storage={tmp_path}"], check_results=False
        ).experiment
        for arm in ttt.arms("reuse")
    }
    assert list(resolved) == ["new_actors", "workbench"]
    before, after = resolved["new_actors"], resolved["workbench"]
    assert (before.reuse_actors, after.reuse_actors) == (False, True)
    assert before.model_copy(update={"reuse_actors": True}) == after


def test_end_to_end_runs_every_arm_and_the_learning_race(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "end_to_end.py"),
            *("--rounds", "2", "--iterations", "1", "--batch", "256", "--seeds", "0"),
            *("--target", "30", "--max-steps", "3000", "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())
    rows = {row["arm"]: row for row in figures["throughput"]}
    assert list(rows) == ["rllib_example", "rllib_example_sim_ext", "fast_runner_only", "workbench"]
    assert rows["rllib_example"]["vs_example"] == 1.0
    for row in rows.values():
        assert len(row["rounds"]) == 2 and all(r > 0 for r in row["rounds"])
        assert 0 < row["sampling_share"] < 1
    # The workbench arm is built by the workbench, with its small-env defaults.
    assert "defaults: small_env" in result.stderr
    learning = figures["learning"]
    assert [r["arm"] for r in learning] == ["rllib_example", "workbench"]
    assert all(r["seed"] == 0 and r["best"] > 0 for r in learning)
    assert "time to 30" in result.stdout


def test_zoo_reference_counts_steps_and_finds_the_crossing() -> None:
    zoo = _benchmark("zoo_reference")
    # The mean of the episodes that ended in each block of 100 env steps.
    crossing = zoo.Crossing(475.0, block=100)
    assert not crossing.add([500.0], steps=50)  # the block is not over
    assert not crossing.add([400.0], steps=100)  # mean 450
    assert crossing.best == 450.0
    assert not crossing.add([], steps=200)  # no episode ended: no mean
    assert crossing.add([490.0, 480.0], steps=300)  # mean 485
    assert crossing.block_end == 400 and crossing.best == 485.0
    assert not crossing.add([100.0], steps=408)  # a new block

    study = optuna.create_study(direction="maximize")

    def objective(trial: optuna.Trial) -> float:
        # Trials 0 and 2 run to the end (5 reports); trial 1 is pruned after 2.
        for step in range(1, 6):
            trial.report(float(step), step)
            if trial.number == 1 and step == 2:
                raise optuna.TrialPruned
        return 1.0

    study.optimize(objective, n_trials=3)
    steps, pruned = zoo.search_env_steps(study, n_timesteps=50_000, n_evaluations=5)
    assert pruned == 1
    assert steps == 2 * 50_000 + 2 * 10_000
