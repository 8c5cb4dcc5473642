"""The benchmarks' pieces without running them: the experiments time_to_target's arms
resolve to, and zoo_reference's counting (the scripts themselves run in
tests/benchmarks/test_benchmarks.py)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from workbench.experiment.resolve import load_and_resolve

ROOT = Path(__file__).resolve().parents[2]


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


def test_scheduler_shootout_arms_spend_one_budget_on_one_task(tmp_path: Path) -> None:
    shootout = _benchmark("scheduler_shootout")
    budget = shootout.Budget(total_env_steps=98_304, population=4, steps_per_iteration=2048)
    assert (budget.member_steps, budget.member_iterations) == (24_576, 12)
    resolved = {
        arm: load_and_resolve(
            shootout.TASKS["mountaincar"],
            [*shootout.arm_overrides(arm, budget, seed=5), f"storage={tmp_path}"],
            check_results=False,
        ).experiment
        for arm in shootout.ARMS
    }
    kinds = {arm: e.scheduler.type for arm, e in resolved.items()}
    assert kinds == {
        "pbt": "pbt",
        "pb2": "pb2",
        "asha_optuna": "asha",
        "random": "fifo",
        "pbt_interval2": "pbt",
    }
    for arm in ("pbt", "pb2", "random", "pbt_interval2"):
        e = resolved[arm]
        assert (e.population, e.stop.env_steps) == (4, 24_576), arm
    asha = resolved["asha_optuna"]
    assert (asha.population, asha.max_concurrent, asha.stop.iterations) == (8, 4, 12)
    assert (asha.scheduler.max_t, asha.scheduler.grace_period) == (12, 3)  # type: ignore[union-attr]
    assert asha.search.type == "optuna" and asha.search.seed == 5
    # 8 x 3 + 4 x 3 + 2 x 6 iterations if every rung fills: the members' 4 x 12.
    assert 8 * 3 + 4 * 3 + 2 * 6 == 4 * 12
    assert resolved["random"].search.type == "random"
    pbt, short = resolved["pbt"].scheduler, resolved["pbt_interval2"].scheduler
    assert (pbt.perturbation_interval, pbt.burn_in_period) == (4, 4)  # type: ignore[union-attr]
    assert (short.perturbation_interval, short.burn_in_period) == (2, 2)  # type: ignore[union-attr]
    for arm, e in resolved.items():
        assert e.seed == 5 and e.stop.return_mean is None and e.stop.wall_time_s is None, arm
        assert e.stop.population_env_steps == 98_304, arm  # the same cap for every arm
        assert (
            e.env.id == "sim_ext/MountainCarContinuous-v0"
            and e.training == resolved["pbt"].training
        ), arm


def test_the_shootout_places_each_checkpoint_at_the_populations_env_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two members sampling 100 env steps an iteration; A is exploited after its
    # iteration 2 and reports iteration 2 again (from the donor's checkpoint).
    import workbench.policy.checkpoint as checkpoint_module
    from workbench.trial.manifest import MANIFEST_FILE

    shootout = _benchmark("scheduler_shootout")

    def row(iteration: int, stamp: int) -> dict[str, Any]:
        return {
            "training_iteration": iteration,
            "timestamp": stamp,
            "env_runners": {"num_env_steps_sampled": 100},
        }

    trials = {
        "A": [row(1, 100), row(2, 102), row(2, 106)],
        "B": [row(1, 101), row(2, 104)],
    }
    written = {("A", 0): (2, 102.5), ("A", 1): (2, 106.2), ("B", 0): (1, 101.3)}
    folders: dict[str, list[Path]] = {"A": [], "B": []}
    iterations = {}
    for (name, n), (iteration, when) in written.items():
        folder = tmp_path / name / f"checkpoint_{n:06d}"
        folder.mkdir(parents=True)
        (folder / MANIFEST_FILE).write_text("{}")
        os.utime(folder / MANIFEST_FILE, (when, when))
        folders[name].append(folder)
        iterations[folder] = iteration
    monkeypatch.setattr(checkpoint_module, "trial_checkpoints", lambda d: folders[d.name])
    monkeypatch.setattr(
        checkpoint_module,
        "read_checkpoint",
        lambda path: SimpleNamespace(training_iteration=iterations[path], path=path),
    )
    points = shootout.checkpoint_steps(tmp_path, trials)
    # Rows in time order: A1 100, B1 200, A2 300, B2 400, A2 again 500 population steps.
    assert [(steps, path.parent.name, path.name) for steps, path in points] == [
        (200.0, "B", "checkpoint_000000"),
        (300.0, "A", "checkpoint_000000"),
        (500.0, "A", "checkpoint_000001"),
    ]
    # The curve is the best evaluation so far, at those steps.
    returns = {folders["B"][0]: -5.0, folders["A"][0]: 10.0, folders["A"][1]: 3.0}
    import workbench.policy.evaluate as evaluate_module

    monkeypatch.setattr(
        evaluate_module,
        "evaluate_checkpoint",
        lambda checkpoint, **_: SimpleNamespace(returns=[returns[checkpoint.path], 0.0]),
    )
    assert shootout.evaluated_curve(points, episodes=2, seed=0) == [
        (200.0, -2.5),
        (300.0, 5.0),
        (500.0, 5.0),
    ]
