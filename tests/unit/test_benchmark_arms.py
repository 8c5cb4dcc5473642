"""The benchmarks' pieces without running them: the experiments time_to_target's arms
resolve to, and zoo_reference's counting (the scripts themselves run in
tests/benchmarks/test_benchmarks.py)."""

from __future__ import annotations

import importlib
import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
import yaml

from workbench.experiment.resolve import load_and_resolve
from workbench.tune_ext import snapshot_pace

ROOT = Path(__file__).resolve().parents[2]


def _benchmark(name: str) -> Any:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def _scale_part(name: str) -> Any:
    """A module of benchmarks/population_scale.py (benchmarks/scale_*.py)."""
    _benchmark("population_scale")  # puts the checkout on the path, as running it does
    return importlib.import_module(f"benchmarks.{name}")


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
        "pbt_score": "pbt",
        "pbt_no_margin": "pbt",
        "pbt_spare": "pbt",
        "pb2_spare": "pb2",
        "pbt_late": "pbt",
        "pb2_late": "pb2",
    }
    population_arms = [a for a, kind in kinds.items() if kind != "asha"]
    for arm in population_arms:
        e = resolved[arm]
        assert (e.population, e.stop.env_steps) == (4, 24_576), arm
    asha = resolved["asha_optuna"]
    assert (asha.population, asha.max_concurrent, asha.stop.iterations) == (8, 4, 12)
    assert (asha.scheduler.max_t, asha.scheduler.grace_period) == (12, 3)  # type: ignore[union-attr]
    # Optuna's TPE models the study after 3 trials (its own default, 10, is more trials
    # than the arm runs: every suggestion would be random).
    assert (asha.search.type, asha.search.seed, asha.search.startup_trials) == ("optuna", 5, 3)
    assert 8 * 3 + 4 * 3 + 2 * 6 == 4 * 12
    assert resolved["random"].search.type == "random"
    # The shipped defaults against PBT as it was: ranked on the training window, cloned
    # on any higher score.
    pbt, old = resolved["pbt"].scheduler, resolved["pbt_score"].scheduler
    assert (pbt.rank_on, pbt.exploit_test) == ("evaluation", "welch")  # type: ignore[union-attr]
    assert (old.rank_on, old.exploit_test) == ("score", "none")  # type: ignore[union-attr]
    # The development arms that spare a member still improving; the others do not.
    spares = {arm: e.scheduler.spare_improving for arm, e in resolved.items() if "pb" in arm}  # type: ignore[union-attr]
    assert {arm for arm, spare in spares.items() if spare} == {"pbt_spare", "pb2_spare"}
    # The first decision: at 4 (PB2 too, now that it takes a burn-in), at 8 for "late".
    burn_ins = {
        arm: e.scheduler.burn_in_period  # type: ignore[union-attr]
        for arm, e in resolved.items()
        if e.scheduler.type in ("pbt", "pb2")
    }
    assert burn_ins == {arm: 8 if arm.endswith("_late") else 4 for arm in burn_ins}
    for arm, e in resolved.items():
        assert e.seed == 5 and e.stop.return_mean is None and e.stop.wall_time_s is None, arm
        assert e.stop.population_env_steps == 98_304, arm  # the same cap for every arm
        # Every arm's result is chosen by the same rule, from the same evaluations.
        assert e.evaluation.at_end == "best" and e.evaluation.every == 2, arm
        assert (
            e.env.id == "sim_ext/MountainCarContinuous-v0"
            and e.training == resolved["pbt"].training
        ), arm


def test_pbt_and_pb2_arms_keep_the_tasks_exploit_margin(tmp_path: Path) -> None:
    shootout = _benchmark("scheduler_shootout")
    task = shootout.TASKS["mountaincar"]
    assert shootout.task_min_gain(task) == 50.0  # the flag's +100, halved: its comment
    assert shootout.task_min_gain(shootout.TASKS["lunarlander"]) == 0.0
    budget = shootout.Budget(total_env_steps=98_304, population=4, steps_per_iteration=2048)
    margins = {
        arm: load_and_resolve(
            task,
            [*shootout.arm_overrides(arm, budget, 5, min_gain=50.0), f"storage={tmp_path}"],
            check_results=False,
        ).experiment.scheduler.exploit_min_gain  # type: ignore[union-attr]
        for arm in ("pbt", "pb2", "pbt_no_margin", "pbt_score", "pbt_spare", "pb2_spare")
    }
    assert margins == {
        "pbt": 50.0,
        "pb2": 50.0,
        "pbt_no_margin": 0.0,
        "pbt_score": 0.0,
        "pbt_spare": 50.0,
        "pb2_spare": 50.0,
    }


def test_the_shootouts_seeds_are_labelled_and_development_seeds_checked() -> None:
    shootout = _benchmark("scheduler_shootout")
    assert shootout.parse_seeds("report") == list(range(100, 110))
    assert shootout.parse_seeds("dev:10-12") == [10, 11, 12]
    assert shootout.parse_seeds("7,8,9") == [7, 8, 9]
    with pytest.raises(ValueError, match="0-49"):
        shootout.parse_seeds("dev:48-51")
    labels = {s: shootout.seed_set(s) for s in (0, 49, 50, 100, 109, 110)}
    assert labels == {
        0: "development",
        49: "development",
        50: "held-out",
        100: "report",
        109: "report",
        110: "held-out",
    }


def test_the_shootouts_curve_places_each_evaluation_at_the_populations_env_steps(
    tmp_path: Path,
) -> None:
    from workbench.trial.candidates import Evaluated, record

    shootout = _benchmark("scheduler_shootout")

    def row(iteration: int, stamp: int) -> dict[str, Any]:
        return {
            "training_iteration": iteration,
            "timestamp": stamp,
            "env_runners": {"num_env_steps_sampled": 100},
        }

    trials = {"A": [row(1, 100), row(2, 102), row(2, 106)], "B": [row(1, 101), row(2, 104)]}
    made = [("A", 2, 50.0, 102.5), ("B", 2, 80.0, 104.2), ("A", 2, 60.0, 107.0)]
    for name, iteration, mean, at in made:
        evaluated = Evaluated(name, iteration, mean, 1.0, 5, 500, 0.1, at=at)
        record(tmp_path / name, evaluated, keep=0, save=lambda folder: None)
    curve, best = shootout.short_evaluation_curve(tmp_path, trials)
    # Rows up to each evaluation's second (Tune's whole-second timestamps): 3, 4 and 5
    # rows of 100 env steps; the best evaluation so far.
    assert curve == [[300.0, 50.0], [400.0, 80.0], [500.0, 80.0]]
    assert best == 80.0


def test_the_shootouts_statistics() -> None:
    stats = _benchmark("shootout_stats")
    assert stats.iqm([1, 2, 3, 4, 100, 5, 6, 7]) == pytest.approx(4.5)
    assert stats.probability_of_improvement([2, 2], [1, 2]) == pytest.approx(0.75)
    same = stats.median_difference([5.0, 6.0, 7.0], [5.0, 6.0, 7.0])
    assert (same.value, same.low, same.high) == (0.0, 0.0, 0.0)
    better = stats.mean_difference([10.0, 11.0, 12.0, 13.0], [1.0, 1.5, 2.0, 2.5])
    assert 0 < better.low <= better.value <= better.high
    assert better.value == pytest.approx(9.75)
    assert stats.improvement([10.0, 11.0], [1.0, 2.0]).value == 1.0
    # One seed: a figure without an interval.
    assert stats.iqm_interval([3.0]).text() == "3.0 [-]"


@pytest.mark.parametrize("task_name", ["lunarlander", "mountaincar"])
@pytest.mark.parametrize("population", [4, 8])
def test_population_throughput_runs_the_shipped_experiment_all_at_once(
    tmp_path: Path, task_name: str, population: int
) -> None:
    pt = _benchmark("population_throughput")
    task = pt.TASKS[task_name]
    data = pt.experiment_data(task, population, 6, 2, tmp_path, "workbench")
    resolved = pt.resolved_experiment(data, tmp_path / "wb").experiment
    shipped = load_and_resolve(task.experiment, check_results=False).experiment
    # Every trial at once on 2 CPUs; the file's settings otherwise.
    assert resolved.resources.cpus_main + resolved.resources.cpus_per_learner == 2 / population
    assert resolved.population == population and resolved.stop.iterations == 6
    assert resolved.training == shipped.training and resolved.model == shipped.model
    assert resolved.scheduler.type == shipped.scheduler.type
    assert resolved.evaluation.at_end == "none"
    assert resolved.evaluation.every == shipped.evaluation.every
    assert population * resolved.scheduler.quantile_fraction >= 1
    rllib = pt.resolved_experiment(pt.rllib_data(data), tmp_path / "rl").experiment
    assert (rllib.env_runner, rllib.learner, rllib.defaults) == ("rllib", "rllib", "rllib")
    assert not rllib.model


def test_pbt_and_pb2_arms_keep_the_tasks_spare_rule(tmp_path: Path) -> None:
    shootout = _benchmark("scheduler_shootout")
    task = shootout.TASKS["mountaincar"]
    assert shootout.task_spare(task) is False
    budget = shootout.Budget(total_env_steps=98_304, population=4, steps_per_iteration=2048)

    def spares(task_spare: bool) -> dict[str, bool]:
        return {
            arm: load_and_resolve(
                task,
                [
                    *shootout.arm_overrides(arm, budget, 5, spare_improving=task_spare),
                    f"storage={tmp_path}",
                ],
                check_results=False,
            ).experiment.scheduler.spare_improving  # type: ignore[union-attr]
            for arm in ("pbt", "pb2", "pbt_score", "pbt_spare", "pb2_spare")
        }

    assert spares(False) == {
        "pbt": False,
        "pb2": False,
        "pbt_score": False,
        "pbt_spare": True,
        "pb2_spare": True,
    }
    assert spares(True) == {
        "pbt": True,
        "pb2": True,
        "pbt_score": False,  # PBT as it was
        "pbt_spare": True,
        "pb2_spare": True,
    }


def test_pbt_and_pb2_arms_keep_the_tasks_first_decision(tmp_path: Path) -> None:
    shootout = _benchmark("scheduler_shootout")
    task = shootout.TASKS["mountaincar"]
    assert shootout.task_burn_in(task) == 4
    budget = shootout.Budget(total_env_steps=98_304, population=4, steps_per_iteration=2048)
    for arm, expected in (("pbt", 8), ("pb2", 8), ("pbt_late", 8), ("pbt_score", 8)):
        sets = [*shootout.arm_overrides(arm, budget, 5, burn_in=8), f"storage={tmp_path}"]
        experiment = load_and_resolve(task, sets, check_results=False).experiment
        assert experiment.scheduler.burn_in_period == expected, arm  # type: ignore[union-attr]


def test_sb3s_schedules_end_at_rl_zoos_horizon_whatever_the_run_length() -> None:
    sb3 = _benchmark("sb3_cartpole")

    def lin(remaining: float) -> float:  # RL Zoo's lin_1e-3 in SB3's terms
        return remaining * 1e-3

    # A run of 400k env steps, RL Zoo's 1e5 horizon: half-way at 50k, 0 from 100k on.
    schedule = sb3.over_horizon(lin, horizon=1e5, total=4e5)
    assert schedule(1.0) == pytest.approx(1e-3)
    assert schedule(1.0 - 50_000 / 4e5) == pytest.approx(0.5e-3)
    assert schedule(1.0 - 100_000 / 4e5) == pytest.approx(0.0)
    assert schedule(0.0) == 0.0
    assert sb3.over_horizon(0.2, horizon=1e5, total=4e5) == 0.2  # a constant stays


def test_sb3_gets_the_sweep_workbench_fast_got_and_its_choice_comes_from_it() -> None:
    e2e = _benchmark("end_to_end")
    sb3_ppo_args = {"n_envs", "n_steps", "n_epochs", "batch_size", "learning_rate"}
    sb3_ppo_args |= {"gamma", "gae_lambda"}
    for name, sets in e2e.SB3_SWEEP.items():
        assert {item.split("=")[0] for item in sets} <= sb3_ppo_args, name
    assert len(set(e2e.SB3_SWEEP.values())) == len(e2e.SB3_SWEEP)  # each setting once
    assert e2e.SB3_FAST in e2e.SB3_SWEEP.values()
    # Each tuned arm is compared with the other side's tuned arm.
    assert ("workbench_fast", "sb3_fast") in e2e.ZOO_PAIRS


def _scale_row(size: int, round_: int, rate: float, outside: float) -> dict[str, Any]:
    forecast = {
        "results_per_s": 2.0,
        "results": 100.0,
        "outside": 0.5,
        "before": 0.3,
        "after": 0.1,
        "bound": "the cores",
        "cores": 2.0,
        "iteration_cpu_s": 0.5,
    }
    wall = 100.0
    return {
        "size": size,
        "round": round_,
        "results": rate * wall,
        "wall_s": wall,
        "outside": outside,
        "outside_before": 0.3,
        "outside_after": 0.08,
        "forecast": forecast,
    }


def test_population_scale_sets_the_forecast_beside_each_sizes_median_over_its_rounds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = _scale_part("scale_report")
    rows = [
        _scale_row(4, 1, 2.0, 0.40),
        _scale_row(8, 1, 1.0, 0.50),
        _scale_row(4, 2, 1.0, 0.50),
        _scale_row(8, 2, 1.2, 0.50),
        _scale_row(4, 3, 1.8, 0.60),
    ]
    report.forecast_table(rows)
    out = capsys.readouterr().out
    lines = {line.split("|")[1].strip(): line for line in out.splitlines() if line[:3] == "| 4"}
    lines |= {line.split("|")[1].strip(): line for line in out.splitlines() if line[:3] == "| 8"}
    # Size 4: three rounds; rates 1.0, 1.8, 2.0 -> median 1.8, the forecast 2.0 is +11%;
    # outside 40-60% -> median 50%, the forecast 50% is +0%.
    four = [cell.strip() for cell in lines["4"].split("|")[1:-1]]
    assert four[1] == "3" and four[5] == "1.80 [1.00-2.00]" and four[6] == "+11%"
    assert four[8] == "50.0% [40.0-60.0]" and four[9] == "+0%"
    # The part after each trial's last result: forecast 10%, measured 8%.
    assert four[13:16] == ["10.0%", "8.0% [8.0-8.0]", "+25%"]
    # Size 8: two rounds; rates 1.0 and 1.2 -> median 1.1, the forecast 2.0 is +82%.
    eight = [cell.strip() for cell in lines["8"].split("|")[1:-1]]
    assert eight[1] == "2" and eight[5] == "1.10 [1.00-1.20]" and eight[6] == "+82%"
    assert "within 25% of the measured median: 3 of 4" in out
    # Runs under the population's budget are their own rows, beside those of their size.
    report.forecast_table([*rows, {**_scale_row(4, 1, 1.0, 0.2), "stop": "budget"}])
    out = capsys.readouterr().out
    (budget,) = [line for line in out.splitlines() if line.startswith("| 4 (budget) |")]
    assert [cell.strip() for cell in budget.split("|")[1:-1]][8] == "20.0% [20.0-20.0]"
    assert "| 4 | 3 |" in out


def test_population_scale_sets_each_snapshot_lag_beside_the_anchor_round_by_round(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = _scale_part("scale_report")

    def run(round_: int, lag: float, outside: float, driver_s: float) -> dict[str, Any]:
        row = {**_scale_row(32, round_, 2.0, outside), "costs": "equal", "snapshot_lag_s": lag}
        return {**row, "driver_cpu_s": driver_s, "outside_between": outside / 4}

    # Round 2 is a slower day for both arms: the paired differences stay 2 points and 1 s.
    rows = [
        run(1, 0.0, 0.30, 13.0),
        run(1, 1.0, 0.28, 12.0),
        run(2, 0.0, 0.40, 16.0),
        run(2, 1.0, 0.38, 15.0),
    ]
    report.lag_table(rows)
    out = capsys.readouterr().out
    lines = {
        line.split("|")[2].strip(): [cell.strip() for cell in line.split("|")[1:-1]]
        for line in out.splitlines()
        if line.startswith("| 32 (equal costs) |")
    }
    assert set(lines) == {"0", "1"}
    anchor, paced = lines["0"], lines["1"]
    assert anchor[2] == paced[2] == "2"  # rounds
    assert anchor[3] == "35.0 [30.0-40.0]" and anchor[4] == ""  # no difference to itself
    assert paced[3] == "33.0 [28.0-38.0]" and paced[4] == "-2.0 [-2.0--2.0]"
    # Driver CPU a result: 13 s over 200 results is 65 ms; 12 s is 60 ms (round 1).
    assert paced[8] == "-5.0 [-5.0--5.0]"
    # Without the anchor, or with one lag, there is nothing to set beside it.
    report.lag_table([r for r in rows if r["snapshot_lag_s"] == 1.0])
    report.lag_table([{k: v for k, v in r.items() if k != "snapshot_lag_s"} for r in rows[:2]])
    assert capsys.readouterr().out == ""


def test_population_scale_counts_clones_by_where_they_moved_the_target(tmp_path: Path) -> None:
    import json

    from workbench.names import LINEAGE_FILE

    watch = _scale_part("scale_watch")

    def record(seq: int, decided_at: int, restored: int | None, handed: int) -> str:
        return json.dumps(
            {
                "seq": seq,
                "time": 1.0 + seq,
                "target": "a",
                "target_name": "PPO_00000",
                "source": "b",
                "source_name": "PPO_00001",
                # Tune's own field, written before it takes in the deciding result.
                "target_iteration": decided_at - 1,
                "source_iteration": handed,
                "step": decided_at,
                "exploit_iteration": decided_at,
                "restored_iteration": restored,
                "checkpoint_iteration": handed,
            }
        )

    # Ahead by 4, back by 2, to the same iteration, and one whose target had not yet
    # shown where it went on from (its handed checkpoint's iteration then): ahead by 3.
    lines = [record(0, 4, 8, 8), record(1, 8, 6, 6), record(2, 12, 12, 12), record(3, 16, None, 19)]
    (tmp_path / LINEAGE_FILE).write_text("\n".join(lines) + "\n")
    clones = watch.clone_jumps(tmp_path)
    assert clones == {"clones": 4, "ahead": 2, "back": 1, "same": 1, "net_skipped": 5}
    assert watch.clone_jumps(tmp_path / "none") == {
        "clones": 0,
        "ahead": 0,
        "back": 0,
        "same": 0,
        "net_skipped": 0,
    }


def test_population_scale_keeps_the_most_checkpoint_folders_each_trial_held(
    tmp_path: Path,
) -> None:
    watch = _scale_part("scale_watch")
    folders = watch.CheckpointFolders(tmp_path)
    for name, held in (("PPO_a", 3), ("PPO_b", 1)):
        for k in range(held):
            (tmp_path / name / f"checkpoint_{k:06d}").mkdir(parents=True)
    (tmp_path / "PPO_a" / "result.json").write_text("")
    (tmp_path / "lineage.jsonl").write_text("")  # not a trial's folder
    folders.look()
    # A folder pruned later does not lower the peak; one more raises it.
    (tmp_path / "PPO_a" / "checkpoint_000000").rmdir()
    (tmp_path / "PPO_b" / "checkpoint_000001").mkdir()
    folders.look()
    assert folders.peak == {"PPO_a": 3, "PPO_b": 2}


def test_population_scale_forecasts_each_size_and_stop_without_running_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    scale = _benchmark("population_scale")
    # The plan's own documented rates stand in for the probe's measurement; the trial's
    # costs, as printed, are the probe's (a crowd measured, the evaluations priced).
    trial = SimpleNamespace(
        iteration_cpu_s=1.5,
        evaluation_s=0.12,
        crowd_measured=True,
        crowd_saturation=2.0,
        crowd_ratio=1.2,
    )
    monkeypatch.setattr(scale, "probe", lambda *_: (None, trial))
    monkeypatch.setattr(scale, "LocalCluster", None)  # nothing is started
    assert scale.main(["--forecast-only", "--sizes", "4,32", "--stops", "iterations,budget"]) == 0
    out = capsys.readouterr().out
    rows = {
        cells[0]: cells
        for line in out.splitlines()
        if line.startswith("| 4") or line.startswith("| 32")
        for cells in [[c.strip() for c in line.split("|")[1:-1]]]
    }
    assert set(rows) == {"4", "4 (budget)", "32", "32 (budget)"}
    # 4 nodes of 2 CPUs on this machine share its cores.
    assert f"{min(8, os.cpu_count() or 1):g} cores shared by the nodes" in out
    assert "the short evaluations' 0.12 included" in out
    assert "a train() among 2 processes a core cost 1.2 times its cost alone (the probe)" in out
    # The budget's 32 x 40 calls; each trial's own 40, less the iterations PBT skips.
    assert rows["32 (budget)"][1] == "1280" and int(rows["32"][1]) < 1280
    # Under the budget no member waits for the slowest.
    after = {k: float(v[6].rstrip("%")) for k, v in rows.items()}
    assert after["32 (budget)"] < after["32"]
    # The model's clones, beside the calls they skip.
    assert float(rows["32"][2]) > 0
    # Members of equal costs: their own probe, their own rows.
    probed = []

    def probe(_args: object, _folder: object, costs: str) -> tuple[None, SimpleNamespace]:
        probed.append(costs)
        return None, SimpleNamespace(iteration_cpu_s=1.5, evaluation_s=0.0, crowd_measured=False)

    monkeypatch.setattr(scale, "probe", probe)
    assert scale.main(["--forecast-only", "--sizes", "32", "--costs", "searched,equal"]) == 0
    out = capsys.readouterr().out
    assert probed == ["searched", "equal"]
    assert "| 32 |" in out and "| 32 (equal costs) |" in out
    assert "its costs equal" in out
    assert "a crowded train() priced by the documented line" in out
    with pytest.raises(SystemExit):
        scale.main(["--forecast-only", "--costs", "cheap"])


def test_population_scale_gives_a_budget_run_the_same_env_steps_for_the_population(
    tmp_path: Path,
) -> None:
    setup = _scale_part("scale_setup")
    each = setup.experiment_data(32, 40, 2.0, 4, tmp_path)
    pooled = setup.experiment_data(32, 40, 2.0, 4, tmp_path, stop="budget")
    batch = each["training"]["train_batch_size_per_learner"]
    assert each["stop"] == {"iterations": 40}
    assert pooled["stop"] == {"population_env_steps": 32 * 40 * batch}
    assert {k: v for k, v in pooled.items() if k != "stop"} == {
        k: v for k, v in each.items() if k != "stop"
    }
    path = tmp_path / "budget.yaml"
    path.write_text(yaml.safe_dump(pooled))
    stop = load_and_resolve(path, check_results=False).experiment.stop
    assert stop.population_env_steps == 32 * 40 * batch and stop.iterations is None


def test_population_scale_with_equal_costs_fixes_the_keys_that_set_a_train_s_work(
    tmp_path: Path,
) -> None:
    setup = _scale_part("scale_setup")
    report = _scale_part("scale_report")
    searched = setup.experiment_data(32, 40, 2.0, 4, tmp_path / "a")
    (tmp_path / "b").mkdir()
    equal = setup.experiment_data(32, 40, 2.0, 4, tmp_path / "b", costs="equal")
    # The two keys are fixed in the training section, out of the searched space; the
    # rest of the space and the experiment are as the main experiment's.
    assert {k: equal["training"][k] for k in setup.EQUAL_COSTS} == setup.EQUAL_COSTS
    wide = yaml.safe_load(Path(searched["search_space"]["file"]).read_text())
    space = yaml.safe_load(Path(equal["search_space"]["file"]).read_text())
    assert set(setup.EQUAL_COSTS) <= set(wide)
    assert space == {k: v for k, v in wide.items() if k not in setup.EQUAL_COSTS}
    apart = ("training", "search_space", "storage")  # (storage: each its own folder)
    assert {k: v for k, v in equal.items() if k not in apart} == {
        k: v for k, v in searched.items() if k not in apart
    }
    path = tmp_path / "equal.yaml"
    path.write_text(yaml.safe_dump(equal))
    resolved = load_and_resolve(path, check_results=False)
    assert not set(setup.EQUAL_COSTS) & set(resolved.search_space)
    with pytest.raises(ValueError, match="costs 'cheap': one of searched, equal"):
        setup.experiment_data(4, 40, 2.0, 4, tmp_path, costs="cheap")
    # Its runs are their own rows in the tables, named as such.
    assert report.population_label({"size": 32, "costs": "equal"}) == "32 (equal costs)"
    label = report.population_label({"size": 32, "stop": "budget", "costs": "equal"})
    assert label == "32 (budget, equal costs)"
    assert report.population_label({"size": 32, "stop": "iterations"}) == "32"


def test_population_scale_calibrates_on_the_runs_stopped_at_their_iterations(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calibration = _scale_part("scale_calibration")
    fitted: list[list[dict[str, object]]] = []

    kept: list[bool] = []

    def fit(runs: list[dict[str, object]], *, keep_clones: bool) -> dict[str, float]:
        fitted.append(runs)
        kept.append(keep_clones)
        return {"start_s": 5.0}

    monkeypatch.setattr(calibration, "calibration", fit)
    monkeypatch.setattr(calibration, "compared", lambda runs, fit: f"compared on {len(runs)}")
    main = {"size": 32, "outside_before": 0.1}
    rows = [
        main,
        {**main, "stop": "budget"},
        {**main, "costs": "equal"},
        {**main, "costs": "searched", "stop": "iterations"},
        {"size": 32},  # no split: a run without its trials' results
        {**main, "snapshot_lag_s": 0.0},  # the anchor's arm: a driver the workbench lacks
        {**main, "snapshot_lag_s": snapshot_pace.LAG_S},
    ]
    calibration.calibrate(rows, [])
    # Each size and space is priced from its own probe: the equal costs' runs are fitted
    # too; the budget's are checked against the model, not fitted.
    assert fitted == [[rows[0], rows[2], rows[3], rows[6]]]
    out = capsys.readouterr().out
    assert "start_s = 5" in out and "compared on 4" in out
    calibration.calibrate(rows, [], keep_clones=True)  # --keep-clones
    assert kept == [False, True]


def test_population_scale_measures_a_results_own_cpu_from_the_time_between_results() -> None:
    calibration = _scale_part("scale_calibration")
    from workbench.plan.population import MEASURED

    # 8 trials on 2 cores: a train() of 1.5 CPU s takes 6 s; a result's own work of 0.1
    # CPU s takes 0.4 s of the slot, between results: 0.4 / (6 + 0.4) of the slot time.
    results, slot = 320, 320 * 6.4
    row = {
        "size": 8,
        "results": results,
        "outside": 0.4 * results / slot,
        "outside_between": 0.4 * results / slot,
        "trial_cpu_s": 8 * 5.0 + results * 1.6,  # the starts, train() and the results' work
        "forecast": {"start_s": 5.0},
    }
    assert calibration.result_cpu(row, MEASURED) == pytest.approx(0.1)
    # Each trial process's start measured: the trials' CPU less those, not the model's.
    measured = {**row, "start_cpu_s": [4.0] * 4 + [6.0] * 4, "forecast": {"start_s": 99.0}}
    assert calibration.result_cpu(measured, MEASURED) == pytest.approx(0.1)
    assert calibration.result_cpu({"size": 8, "results": 3}, MEASURED) is None  # no split


def test_population_scale_measures_a_start_as_a_line_in_the_processes_per_core() -> None:
    measured_start = _scale_part("scale_calibration").measured_start

    def run(size: int, median: float, runners: int = 0) -> dict[str, Any]:
        starts = [median - 1.0, median, median + 3.0]
        return {
            "size": size,
            "env_runners": runners,
            "start_cpu_s": starts,
            "forecast": {"cores": 2.0, "start_alone_s": 4.0},
        }

    assert measured_start([{"size": 4, "forecast": {"cores": 2.0}}], 0.0) is None
    # One crowd: the median ratio, no growth measured.
    assert measured_start([run(8, 4.4), run(8, 4.8), run(8, 6.0)], 0.0) == (
        pytest.approx(1.2),
        0.0,
    )
    # 1.1 times alone with no crowd, 5% more a process per core: 2 a core at 4 trials, 16
    # at 32; a trial of 1 process and 3 env runners counts 4.
    line = measured_start(
        [run(4, 4.0 * 1.1 * 1.1), run(32, 4.0 * 1.1 * 1.8), run(2, 4.0 * 1.1 * 1.2, runners=3)],
        0.0,
    )
    assert line == (pytest.approx(1.1), pytest.approx(0.05))


def test_population_scale_counts_a_starts_crowd_on_the_cores_the_forecast_shares() -> None:
    """The start's growth is measured against the crowd the simulated runs count it in: the
    trial processes per core that Ray's own processes leave them. Runs whose starts follow
    the forecast's own pricing give back its constants."""
    from workbench.plan.population import cores_left
    from workbench.plan.simulate import Costs

    measured_start = _scale_part("scale_calibration").measured_start
    ray_per_node, nodes, cores = 0.25, 2, 2.0
    left = cores_left(cores, nodes, ray_per_node)
    assert left == pytest.approx(1.5)
    priced = Costs(processes=1, start_s=1.1, rest_s=0.0, driver_s=0.0, start_per_process=0.04)
    runs = [
        {
            "size": size,
            "nodes": nodes,
            "start_cpu_s": [4.0 * priced.start(size / left)] * 3,
            "forecast": {"cores": cores, "start_alone_s": 4.0},
        }
        for size in (4, 8, 32)
    ]
    assert measured_start(runs, ray_per_node) == (pytest.approx(1.1), pytest.approx(0.04))
    # Counted on all the cores instead, the growth comes out steeper by cores / left.
    steeper = measured_start(runs, 0.0)
    assert steeper is not None
    assert steeper[1] == pytest.approx(0.04 * cores / left)


def test_population_scale_measures_the_runs_end_after_its_last_result() -> None:
    measured_end = _scale_part("scale_calibration").measured_end
    assert measured_end([{"size": 4}]) is None
    # Each run's shortest wait from a last result to fit()'s return is its end (the others
    # waited for the slowest); Tune's whole-second stamps add half a second on average.
    runs = [{"last_result_to_end_s": [e, e + 30.0]} for e in (2.0, 2.5, 4.0)]
    assert measured_end(runs) == pytest.approx(2.0)


def test_population_scale_calibration_finds_the_constants_its_runs_were_made_with() -> None:
    from workbench.plan.population import (
        Constants,
        TrialCosts,
        exploits_of,
        forecast,
        with_constants,
    )

    calibration = _scale_part("scale_calibration")
    # Draws far apart: the slow trials fall an interval behind and are cloned.
    draws = ((0.1, 0.1), (0.5, 0.5), (1.0, 1.0))
    costs = TrialCosts(
        processes=1,
        start_s=0.0,
        iterations=draws,
        result_s=0.0,
        result_s_per_process=0.0,
        crowd_exponent=1.0,
        train_per_process=0.0,
        driver_s=0.0,
        ray_cores_per_node=0.0,
        clone_share=1.0,
        source="test",
    )
    truth = Constants(
        start_s=8.0,
        start_alone_s=6.4,  # the runs' probe's fresh process alone, as below
        start_per_process=0.02,
        result_s=0.3,
        result_s_per_process=0.02,
        crowd_exponent=2.0,
        train_per_process=0.05,
        driver_s=0.1,
        ray_cores_per_node=0.05,
        clone_share=0.5,
        score_noise=2.0,
        # Measured from the split of each run's time, which these rows leave out (its own
        # test: ..._measures_a_results_own_cpu_from_the_time_between_results).
        result_cpu_s=0.0,
    )
    exploits = exploits_of(calibration.experiment_scheduler())
    # The runs of 6 recorded their own first draws (all cheap), which the fit must price
    # them at; the runs of 12 did not (older runs), and take the quantiles.
    own = {6: ((0.1, 0.1),) * 3 + ((0.5, 0.5),) * 3, 12: None}

    def rows_of(truth: Constants) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for size in (6, 12):
            fc = forecast(
                replace(with_constants(costs, truth), drawn=own[size]),
                trials=size,
                at_once=size,
                cores=2.0,
                iterations=12,
                exploits=exploits,
                nodes=4,
            )
            for round_, scale_by in ((1, 0.9), (2, 1.0), (3, 1.3)):  # the median is the truth
                rows.append(
                    {
                        "size": size,
                        "round": round_,
                        "nodes": 4,
                        "iterations": 12,
                        "results": fc.results,
                        "clones": {"clones": fc.clones, "back": fc.clones_back},
                        "wall_s": fc.wall_s * scale_by,
                        "outside": fc.outside * scale_by,
                        "outside_before": fc.before * scale_by,
                        "driver_cpu_s": 0.1 * fc.results,
                        "ray_cpu_s": 0.2 * fc.wall_s * scale_by,
                        "forecast": {
                            "cores": 2.0,
                            "iteration_costs": [list(d) for d in draws],
                            "drawn_costs": own[size] and [list(d) for d in own[size]],
                            # The probe's fresh process alone.
                            "start_alone_s": 6.4,
                        },
                    }
                )
        return rows

    rows = rows_of(truth)
    # A grid holding the truth among its neighbours: the fit picks it and stays there.
    grid = [
        (s, r, k, e, d)
        for s in (6.0, 8.0)
        for r in (0.2, 0.3)
        for k in (0.02, 0.04)
        for e in (1.0, 2.0)
        for d in (0.0, 0.05)
    ]
    # And the clones' fit tries the truth among its neighbours (the runs', CLONE_GRID).
    clone_grid = [
        (noise, share, learn, ceiling)
        for ceiling in (math.inf, 6.0)
        for learn in (0.0, 1.5)
        for noise in (1.0, 2.0, 3.0)
        for share in (0.6, 0.5, 0.4)
    ]
    fitted = calibration.calibration(rows, grid=grid, shipped=truth, clone_grid=clone_grid)
    assert fitted["largest_error"] < 0.01
    assert (fitted["start_s"], fitted["result_s"]) == (8.0, 0.3)
    # The start is fitted in the runs' CPU seconds, beside their measured start alone.
    assert fitted["start_alone_s"] == 6.4
    assert (fitted["result_s_per_process"], fitted["crowd_exponent"]) == (0.02, 2.0)
    assert fitted["train_per_process"] == 0.05
    # The scores' noise and the clone share, fitted first to the clones and the calls they
    # skipped with the shipped constants (here the truth's): the population's counts,
    # hardly the machine's.
    assert (fitted["score_noise"], fitted["clone_share"]) == (2.0, 0.5)
    assert fitted["learn_exponent"] == 0.0  # every train() counts one iteration
    assert fitted["score_ceiling"] == math.inf  # the scores rise as the trials train
    assert fitted["clones_error"] < 1e-9
    assert fitted["driver_s"] == pytest.approx(0.1)
    assert fitted["ray_cores_per_node"] == pytest.approx(0.05)
    assert fitted["start_per_process"] == 0.02  # the shipped one: no run measured a start
    assert fitted["end_s"] == truth.end_s  # the shipped one: no run recorded its end
    # Where the runs measured their trial processes' starts (1.25 times their probe's
    # process alone, 6.4, with no crowd, and 2% more a process per core of the 1.8 that
    # Ray's processes leave: 3.3 a core at 6 trials, 6.7 at 12), the start and its growth
    # are those, whatever the grid holds and whatever was shipped, and the rest is fitted
    # around them.
    for row in rows:
        median = 6.4 * 1.25 * (1 + 0.02 * row["size"] / 1.8)
        row["start_cpu_s"] = [median - 0.4, median, median, median + 0.1, median + 0.5]
    off_grid = [(10.0 if point[0] == 8.0 else point[0], *point[1:]) for point in grid]
    shipped_flat = replace(truth, start_per_process=0.0)
    measured = calibration.calibration(
        rows, grid=off_grid, shipped=shipped_flat, clone_grid=clone_grid
    )
    assert measured["start_measured"] == 1.0
    assert measured["start_s"] == pytest.approx(8.0)
    assert measured["start_per_process"] == pytest.approx(0.02)
    assert measured["start_alone_s"] == 6.4
    assert (measured["result_s"], measured["train_per_process"]) == (0.3, 0.05)
    assert measured["largest_error"] < 0.01
    assert fitted["start_measured"] == 0.0  # the first fit's, from no measured start
    # --keep-clones: the shipped pair stays (here far from the runs'), the rest is fitted.
    shipped = replace(truth, score_noise=12.0, clone_share=0.9)
    kept = calibration.calibration(rows, grid=grid, shipped=shipped, keep_clones=True)
    assert (kept["score_noise"], kept["clone_share"]) == (12.0, 0.9)
    assert kept["clones_error"] > 0.1
    # Runs whose trials' progress counts each call at its work to the power 1.5 (the dear
    # draws outrank the cheap): the clones, those back and the calls skipped give it back,
    # with the noise and the share.
    learned = calibration.calibration(
        rows_of(replace(truth, learn_exponent=1.5)),
        grid=grid,
        shipped=truth,
        clone_grid=clone_grid,
    )
    assert (learned["learn_exponent"], learned["score_noise"], learned["clone_share"]) == (
        1.5,
        2.0,
        0.5,
    )
    assert learned["clones_error"] < 1e-9
    # Runs whose scores level off past 6 iterations of progress (the task solved): the
    # members there clone back as often as forward, and the fit finds the ceiling.
    level = calibration.calibration(
        rows_of(replace(truth, score_ceiling=6.0)),
        grid=grid,
        shipped=truth,
        clone_grid=clone_grid,
    )
    assert (level["score_ceiling"], level["score_noise"], level["clone_share"]) == (
        6.0,
        2.0,
        0.5,
    )
    assert level["learn_exponent"] == 0.0 and level["clones_error"] < 1e-9
    # The forecast's errors on the runs (each size's median round): none on the constants
    # they were made with, and the shipped, the measured ones new and the refit side by
    # side, with how many of the bar's figures each brings within 25%.
    # (A start is priced against the runs' probe's process alone, 6.4: on constants whose
    # reference is half that, it costs twice the start.)
    runs = calibration.Groups.of(rows)
    for errors in calibration.errors(runs, truth).values():
        assert errors == pytest.approx((0.0, 0.0, 0.0), abs=1e-9)
    off = calibration.errors(runs, replace(truth, start_s=16.0))
    assert off == calibration.errors(runs, replace(truth, start_alone_s=3.2))
    assert all(rate < -0.05 and outside > 0.05 for rate, outside, _ in off.values())
    table = calibration.compared(rows, {**fitted, "start_s": truth.start_s})
    assert "| runs | results/s | shipped | measured ones new | refit | outside train() |" in table
    six = next(line for line in table.splitlines() if line.startswith("| 6 |"))
    assert six.endswith("| +0% |")  # the refit's share outside train(), the last column
    within = next(line for line in table.splitlines() if line.startswith("within 25% of 4: "))
    assert within.endswith("refit 4")
    # And what the clones' fit matched, the runs' (the rounds' median) beside each variant's:
    # the refit's, the truth's, as the runs.
    assert "| runs | clones (back), calls | shipped | measured ones new | refit |" in table
    twelve = [line for line in table.splitlines() if line.startswith("| 12 |")][-1]
    _, measured, *_, refit = twelve.strip("| ").split(" | ")
    assert measured == refit == "4.2 (0.2), 138"


def test_population_scale_lists_the_long_waits_between_a_trials_results() -> None:
    watch = _scale_part("scale_watch")

    def row(at: float, iteration: int, took: float = 1.0) -> dict[str, Any]:
        return {"timestamp": at, "training_iteration": iteration, "time_this_iter_s": took}

    trials = {
        "a": [row(101, 1), row(103, 2), row(125, 3, took=2.0)],  # waited 20 s
        "b": [row(102, 1), row(140, 9)],  # a clone's jump after 37 s
    }
    assert watch.long_waits(trials, started_at=100.0) == [
        (25.0, 20.0, "a", 2, 3),
        (40.0, 37.0, "b", 1, 9),
    ]
    assert watch.long_waits(trials, started_at=100.0, at_least_s=30) == [(40.0, 37.0, "b", 1, 9)]


def test_population_scale_reads_a_trial_processs_cpu_when_its_first_train_began() -> None:
    watch = _scale_part("scale_watch")
    scale = _scale_part("population_scale")
    memory = watch.TrialMemory.__new__(watch.TrialMemory)  # no cluster: only its samples
    memory.cpu_series = {7: [(100.0, 2.0), (100.5, 3.0), (101.0, 3.5)]}
    # Between two samples, the CPU at that moment on the line between them.
    assert memory.cpu_at(7, 100.25) == pytest.approx(2.5)
    assert memory.cpu_at(7, 100.5) == pytest.approx(3.0)  # on a sample: that sample's
    # Not sampled on both sides (before the first sample, after the last, another
    # process): unknown, not the nearest sample.
    assert memory.cpu_at(7, 99.0) is None
    assert memory.cpu_at(7, 101.5) is None
    assert memory.cpu_at(8, 100.25) is None
    # Tune stamps a result in whole seconds: the middle of the second, less the iteration.
    began = scale.first_train_began({"timestamp": 110, "time_this_iter_s": 2.25})
    assert began == pytest.approx(108.25)
