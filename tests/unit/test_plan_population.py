"""The plan's population forecast: iterations per second and the share of the trials' time
outside train(), from one trial's costs and the cores the trials share (the model of
workbench/plan/population.py, checked against measurements by
benchmarks/population_scale.py)."""

from __future__ import annotations

import json
import math
import os
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import TypeAdapter

from tests.unit.test_resources import cluster, experiment, resolved, run_cli
from workbench.experiment.schema import SchedulerSection
from workbench.experiment.search_space import parse_search_space
from workbench.plan.capacity import make_plan
from workbench.plan.forecast_text import forecast_lines
from workbench.plan.population import (
    Constants,
    Forecast,
    TrialCosts,
    budget_of,
    drawn_costs,
    exploits_of,
    forecast,
    iteration_costs,
    iterations_of,
    trial_costs,
)
from workbench.plan.resources import (
    Bundle,
    TrialRequest,
    cluster_from_ray_nodes,
    concurrent_trials,
    ray_place,
)
from workbench.plan.simulate import Costs, Exploits, Outcome, simulate
from workbench.plan.throughput import Throughput
from workbench.run.dry_run import planned_trials

HALF_CPU: dict[str, Any] = {"cpus_main": 0.5, "cpus_per_learner": 0}


def costs(iteration: float = 0.5, **changes: Any) -> TrialCosts:
    """Trials alike: every draw of the hyperparameters costs ``iteration`` a train()."""
    base: dict[str, Any] = {
        "processes": 1,
        "start_s": 8.0,
        "iterations": ((iteration, iteration),),
        "result_s": 0.05,
        "result_s_per_process": 0.0,
        "crowd_exponent": 1.0,
        "train_per_process": 0.0,
        "ray_cores_per_node": 0.0,
        "driver_s": 0.1,
        "clone_share": 1.0,
        "source": "test",
    }
    return TrialCosts(**{**base, **changes})


def own_share(c: TrialCosts, iterations: int) -> float:
    """The share of a lone trial's time (a core to itself) outside train(): its start,
    the driver's work on each result, its wait after each but the last."""
    own = c.start_s + iterations * (c.iteration_wall_s + c.driver_s) + (iterations - 1) * c.result_s
    return 1 - iterations * c.iteration_wall_s / own


def test_with_cores_to_spare_a_trial_takes_its_own_time() -> None:
    c = costs()
    result = forecast(c, trials=1, at_once=1, cores=64, iterations=40)
    assert result.bound == "each trial's own time"
    assert result.wall_s == pytest.approx(8.0 + 40 * 0.6 + 39 * 0.05)
    assert result.outside == pytest.approx(own_share(c, 40))
    assert result.before == pytest.approx(8.0 / result.wall_s)
    assert result.results == 40 and result.iterations_per_s == pytest.approx(40 / result.wall_s)


def test_on_shared_cores_everything_stretches() -> None:
    c = costs(result_s=0.0, driver_s=0.0)
    result = forecast(c, trials=32, at_once=32, cores=2, iterations=40)
    assert result.bound == "the cores"
    assert result.wall_s == pytest.approx(32 * (8.0 + 40 * 0.5) / 2)
    # A trial with more processes starts each of them: more work, the same own time.
    runners = forecast(
        costs(processes=3, result_s=0.0, driver_s=0.0),
        trials=32,
        at_once=32,
        cores=2,
        iterations=40,
    )
    assert runners.wall_s == pytest.approx(result.wall_s + 32 * 2 * 8.0 / 2)


def test_a_driver_slower_than_the_trials_sets_the_pace_and_they_wait_on_it() -> None:
    c = costs(0.05, driver_s=0.6)
    result = forecast(c, trials=32, at_once=32, cores=64, iterations=40)
    assert result.bound == "the driver"
    assert result.wall_s == pytest.approx(32 * 40 * 0.6, rel=0.02)
    assert result.outside > own_share(c, 40)


def test_the_driver_takes_a_core_before_the_trials() -> None:
    # Ray starts its workers at niceness 15: on one core, a trial's train() waits while
    # the driver handles the other trial's result.
    sim = Costs(processes=1, start_s=0.0, rest_s=0.0, driver_s=1.0)
    one = simulate(sim, [(1.0, 1.0)], at_once=1, cores=1, iterations=1, exploits=None)
    assert one.wall_s == pytest.approx(2.0) and one.driver_busy == pytest.approx(0.5)
    two = simulate(sim, [(1.0, 1.0)] * 2, at_once=2, cores=1, iterations=2, exploits=None)
    # Together at half speed to 2 s; the driver then holds the core for each result
    # (2-4 s), and the trials share it again while it has none (4-6 s).
    assert two.wall_s == pytest.approx(8.0)
    assert two.results == 4 and two.cores_busy == pytest.approx(1.0)


def test_a_results_wait_grows_with_the_trial_processes_per_core() -> None:
    wait = Costs(processes=1, start_s=0.0, rest_s=0.1, driver_s=0.0, rest_s_per_process=0.05)
    assert replace(wait, crowd_exponent=2.0).wait_s(4.0) == pytest.approx(0.1 + 0.05 * 4**2)
    assert wait.wait_s(1.0) == pytest.approx(0.1 + 0.05)
    # Every process of a trial counts: a trial of 3 on 3 cores is 1 a core.
    runners = replace(wait, processes=3)
    run = simulate(runners, [(3.0, 1.0)], at_once=1, cores=3, iterations=2, exploits=None)
    assert run.wall_s == pytest.approx(1.0 + (0.1 + 0.05) + 1.0)

    def share(trials: int, **wait: float) -> float:
        c = costs(driver_s=0.0, **wait)
        return forecast(c, trials=trials, at_once=trials, cores=2, iterations=20).outside

    # A fixed wait is a smaller share of longer iterations as the population crowds the
    # same cores; a wait that grows faster than the crowd is a larger one.
    assert share(32, result_s=0.2) < share(4, result_s=0.2)
    growing = {"result_s": 0.0, "result_s_per_process": 0.01, "crowd_exponent": 2.0}
    assert share(32, **growing) > share(4, **growing) + 0.05


def _bare(trials: int, at_once: int, cores: float, mean: float = 0.5, **changes: float) -> Forecast:
    """The forecast of alike trials with no waits and no driver, 10 iterations each."""
    c = costs(mean, result_s=0.0, driver_s=0.0, **changes)
    return forecast(c, trials=trials, at_once=at_once, cores=cores, iterations=10)


def test_a_train_call_costs_more_with_more_trial_processes_per_core() -> None:
    assert Costs(1, 0.0, 0.0, 0.0, train_per_process=0.1).dearer(4.0) == pytest.approx(1.4)
    # Alike trials all under way to their last call: the same population as one whose
    # train() simply cost 40% more (4 a core).
    crowded = _bare(8, 8, 2, train_per_process=0.1)
    dearer = _bare(8, 8, 2, mean=0.5 * 1.4)
    assert crowded.wall_s == pytest.approx(dearer.wall_s)
    assert crowded.wall_s == pytest.approx(8 * (8.0 + 10 * 0.7) / 2)


def test_the_run_ends_a_while_after_its_last_result_and_every_trial_waits_it_out() -> None:
    plain = _bare(4, 4, 4)
    ending = _bare(4, 4, 4, end_s=2.0)
    assert ending.wall_s == pytest.approx(plain.wall_s + 2.0)
    assert ending.results == plain.results
    # Each trial's slot runs to the run's end: 2 s each after its last result.
    slot = 4 * ending.wall_s
    assert ending.after * slot == pytest.approx(plain.after * 4 * plain.wall_s + 4 * 2.0)
    assert ending.outside > plain.outside


def test_a_start_costs_more_with_more_trial_processes_per_core() -> None:
    assert Costs(1, 5.0, 0.0, 0.0, start_per_process=0.1).start(4.0) == pytest.approx(7.0)
    # The first trials start together: every start among all of them (8 on 2 cores is 4 a
    # core: 40% more), as if a start simply cost that; the calls after are unchanged.
    crowded = _bare(8, 8, 2, start_per_process=0.1)
    dearer = _bare(8, 8, 2, start_s=8.0 * 1.4)
    assert crowded.wall_s == pytest.approx(dearer.wall_s)
    assert crowded.before == pytest.approx(dearer.before)
    assert crowded.wall_s == pytest.approx(8 * (8.0 * 1.4 + 10 * 0.5) / 2)
    # A trial that starts alone, in a slot freed by one that ended, pays the crowd then
    # under way: two slots, so never more than one other trial running beside it.
    waves = _bare(4, 2, 2, start_per_process=0.1)
    assert waves.wall_s == pytest.approx(2 * (8.0 * 1.1 + 10 * 0.5))


def test_the_crowd_thins_as_members_stop_and_stays_to_the_end_under_a_budget() -> None:
    # Four trials, a core each, 1 a core while all are under way: a train() 25% dearer.
    sim = Costs(processes=1, start_s=0.0, rest_s=0.0, driver_s=0.0, train_per_process=0.25)
    draws = [(1.0, 1.0)] * 3 + [(3.0, 3.0)]
    each = simulate(sim, draws, at_once=4, cores=4, iterations=4, exploits=None)
    # The cheap three end at 5 s (4 x 1.25); the dear one began its second call at 3.75 s
    # among four, its last two alone (a quarter a core: 3 x 1.0625 each).
    assert each.wall_s == pytest.approx(2 * 3.75 + 2 * 3 * 1.0625)
    # Under a budget no member stops before the end: every call pays the full crowd.
    pooled = simulate(
        sim, [(1.0, 1.0)] * 4, at_once=4, cores=4, iterations=None, exploits=None, budget=16
    )
    assert pooled.wall_s == pytest.approx(4 * 1.25)


def test_rays_own_processes_on_each_node_take_their_share_of_the_cores() -> None:
    c = costs(result_s=0.0, driver_s=0.0, ray_cores_per_node=0.05)
    four = forecast(c, trials=8, at_once=8, cores=2, iterations=10, nodes=4)
    bare = forecast(
        costs(result_s=0.0, driver_s=0.0), trials=8, at_once=8, cores=1.8, iterations=10
    )
    assert four.wall_s == pytest.approx(bare.wall_s)
    assert four.wall_s == pytest.approx(8 * (8.0 + 10 * 0.5) / 1.8)


def test_a_population_larger_than_its_slots_takes_the_next_trial_as_one_ends() -> None:
    c = costs(result_s=0.0, driver_s=0.0)
    one = forecast(c, trials=4, at_once=4, cores=4, iterations=10)
    three = forecast(c, trials=10, at_once=4, cores=4, iterations=10)
    assert three.wall_s == pytest.approx(3 * one.wall_s)
    assert three.iterations_per_s == pytest.approx(100 / three.wall_s)


def test_trials_that_draw_dearer_iterations_finish_last_and_the_others_wait_for_them() -> None:
    # Two jobs of 10 and 20 s on one core: together at half speed until the first is done
    # at 20 s, then the second alone for its last 10 s.
    sim = Costs(processes=1, start_s=0.0, rest_s=0.0, driver_s=0.0)
    run = simulate(
        sim, [(10.0, 10.0), (20.0, 20.0)], at_once=2, cores=1, iterations=1, exploits=None
    )
    assert run.wall_s == pytest.approx(30.0) and run.train_s == pytest.approx(50.0)
    alike = costs(0.5)
    spread = costs(0.5, iterations=((0.1, 0.1), (0.9, 0.9)))
    assert spread.iteration_cpu_s == alike.iteration_cpu_s
    a = forecast(alike, trials=2, at_once=2, cores=4, iterations=40)
    b = forecast(spread, trials=2, at_once=2, cores=4, iterations=40)
    # The slower trial sets the end; the faster one's slot is idle after its last result,
    # so more of the slot time is outside train().
    assert b.wall_s > a.wall_s and b.outside > a.outside


def test_the_slot_time_after_a_trials_last_result_is_its_wait_for_the_slowest() -> None:
    sim = Costs(processes=1, start_s=0.0, rest_s=0.0, driver_s=0.0)
    # Cores to spare: the 10-s trial's slot waits 10 s for the 20-s one.
    spare = simulate(
        sim, [(10.0, 10.0), (20.0, 20.0)], at_once=2, cores=2, iterations=1, exploits=None
    )
    assert spare.wall_s == pytest.approx(20.0) and spare.after_s == pytest.approx(10.0)
    # One core: they share it until the first ends at 20 s; the second ends alone at 30 s.
    shared = simulate(
        sim, [(10.0, 10.0), (20.0, 20.0)], at_once=2, cores=1, iterations=1, exploits=None
    )
    assert shared.after_s == pytest.approx(10.0)
    # A slot that passes to the next trial has no wait: the third trial takes the first's
    # slot at 10 s and ends with the second at 20 s.
    waves = simulate(
        sim,
        [(10.0, 10.0), (20.0, 20.0), (10.0, 10.0)],
        at_once=2,
        cores=2,
        iterations=1,
        exploits=None,
    )
    assert waves.wall_s == pytest.approx(20.0) and waves.after_s == pytest.approx(0.0)
    # Under a budget every trial ends at once: only the call in flight is left over.
    pooled = simulate(
        sim,
        [(10.0, 10.0), (20.0, 20.0)],
        at_once=2,
        cores=2,
        iterations=None,
        exploits=None,
        budget=3,
    )
    assert pooled.results == 3 and pooled.wall_s == pytest.approx(20.0)
    assert pooled.after_s == pytest.approx(0.0)
    # The forecast's shares: before the first result, after the last, within the whole.
    spread = forecast(
        costs(0.5, iterations=((0.1, 0.1), (0.9, 0.9))), trials=2, at_once=2, cores=4, iterations=40
    )
    assert 0 < spread.before < spread.outside and 0.3 < spread.after < spread.outside


def test_pbt_clones_skip_iterations_and_the_population_drifts_to_the_fast_trials() -> None:
    sim = Costs(processes=1, start_s=0.0, rest_s=0.0, driver_s=0.0)
    fast, slow = (0.1, 0.1), (1.0, 1.0)
    pbt = Exploits(interval=4, quantile=0.25)
    alone = simulate(
        sim, [fast, slow, slow, slow], at_once=4, cores=4, iterations=40, exploits=None
    )
    assert alone.results == 160 and alone.wall_s == pytest.approx(40.0)
    run = simulate(sim, [fast, slow, slow, slow], at_once=4, cores=4, iterations=40, exploits=pbt)
    # Each slow trial, last at its decisions, restarts from the fast one's checkpoint
    # and takes its hyperparameters: fewer train() calls, and cheaper ones.
    assert run.results < 160 and run.wall_s < alone.wall_s / 2
    # Each clone skips iterations: every one is to a trial ahead.
    assert alone.clones == 0 and 0 < run.clones <= 160 - run.results
    # Trials in step tie at every decision: a tie is no evidence, nobody is cloned.
    alike = simulate(sim, [slow] * 4, at_once=4, cores=4, iterations=40, exploits=pbt)
    assert alike.results == 160 and alike.clones == 0
    # The plan reads the rule from the experiment's scheduler section.
    assert exploits_of(SimpleNamespace(type="asha")) is None
    section = SimpleNamespace(
        type="pbt", perturbation_interval=4, quantile_fraction=0.25, burn_in_period=0
    )
    assert exploits_of(section) == pbt


def test_a_trial_that_has_its_iterations_leaves_the_donors() -> None:
    # Ray's PBT ranks only the trials not yet finished: once the cheap trial has its 4
    # iterations, the dear one, last at every decision, has nobody to clone.
    sim = Costs(processes=1, start_s=0.0, rest_s=0.0, driver_s=0.0)
    pbt = Exploits(interval=1, quantile=0.5)
    run = simulate(sim, [(0.1, 0.1), (10.0, 10.0)], at_once=2, cores=2, iterations=4, exploits=pbt)
    assert run.clones == 0 and run.results == 8
    assert run.wall_s == pytest.approx(40.0)


def test_a_clone_pays_its_explored_values_cost_not_its_donors() -> None:
    sim = Costs(processes=1, start_s=0.0, rest_s=0.0, driver_s=0.0)
    pbt = Exploits(interval=4, quantile=0.25)
    fast, slow = (0.1, 0.1), (1.0, 1.0)
    draws = [fast, slow, slow, slow]
    seen: list[object] = []

    def explore(point: object, rng: random.Random) -> tuple[object, tuple[float, float]]:
        seen.append(point)
        return "explored", (2.0, 2.0)  # dearer than either

    kept = simulate(sim, draws, at_once=4, cores=4, iterations=40, exploits=pbt)
    run = simulate(
        sim,
        draws,
        at_once=4,
        cores=4,
        iterations=40,
        exploits=pbt,
        points=["fast", "slow", "slow", "slow"],
        explore=explore,
    )
    assert run.clones > 0 and seen and set(seen) <= {"fast", "explored"}
    assert run.wall_s > kept.wall_s  # the clones pay 2 s a train(), not the donor's 0.1


def test_pbts_explore_moves_the_cost_values_as_the_run_perturbs_them(tmp_path: Path) -> None:
    space = {"num_epochs": {"randint": [3, 20]}, "minibatch_size": {"choice": [64, 512]}}
    pbt = {"type": "pbt", "perturbation_interval": 4}
    source = resolved(
        tmp_path, HALF_CPU, population=6, search_space={"params": space}, scheduler=pbt
    )
    plan = make_plan(source, cluster("cpus=2"))
    assert plan.forecast is not None and plan.config is not None
    explore = plan.forecast.costs.explore
    assert explore is not None and plan.forecast.costs.drawn_points is not None
    before = random.getstate()
    batch = float(plan.config.train_batch_size_per_learner)
    moved = [explore((batch, 10.0, 64.0), random.Random(seed)) for seed in range(200)]
    assert random.getstate() == before  # its own draws: the run's seeded PBT is not touched
    epochs = {e for (_, e, _), _ in moved}
    assert epochs <= set(map(float, range(3, 21))) and {8.0, 12.0} <= epochs  # x0.8, x1.2
    assert {m for (_, _, m), _ in moved} == {64.0, 512.0}
    for point, cost in moved:
        assert (
            cost
            == drawn_costs(
                [{"num_epochs": point[1], "minibatch_size": point[2]}], plan.config, plan.throughput
            )[0]
        )  # type: ignore[index]
    assert moved == [explore((batch, 10.0, 64.0), random.Random(s)) for s in range(200)]
    # PB2 picks its values from its model of the scores: its clones keep the donor's cost.
    numeric = {"num_epochs": {"randint": [3, 20]}}
    pb2 = resolved(
        tmp_path / "pb2",
        HALF_CPU,
        population=6,
        search_space={"params": numeric},
        scheduler={"type": "pb2", "perturbation_interval": 4},
    )
    pb2_plan = make_plan(pb2, cluster("cpus=2"))
    assert pb2_plan.forecast is not None and pb2_plan.forecast.costs.explore is None


def test_a_results_own_cpu_is_shared_on_the_cores_like_a_train_call() -> None:
    bare = Costs(processes=1, start_s=0.0, rest_s=0.0, driver_s=0.0)
    work = replace(bare, result_cpu_s=0.5)
    for trials, cores in ((8, 2.0), (2, 2.0)):
        draws = [(1.0, 1.0)] * trials
        base = simulate(bare, draws, at_once=trials, cores=cores, iterations=10, exploits=None)
        more = simulate(work, draws, at_once=trials, cores=cores, iterations=10, exploits=None)
        # 9 results a trial are followed by its work (not the last): on crowded cores it
        # stretches as train() does, so the wall grows by the CPU over the cores.
        crowd = max(trials / cores, 1.0)
        assert more.wall_s - base.wall_s == pytest.approx(9 * 0.5 * crowd, rel=0.02)
        assert more.train_s == pytest.approx(base.train_s)


def test_noisy_scores_clone_trials_back_as_well_as_ahead() -> None:
    sim = Costs(processes=1, start_s=0.0, rest_s=0.0, driver_s=0.0)
    pbt = Exploits(interval=4, quantile=0.25)
    slow = (1.0, 1.0)

    def run(draws: list[tuple[float, float]], noise: float, seed: int = 0) -> Outcome:
        return simulate(
            sim,
            draws,
            at_once=8,
            cores=8,
            iterations=40,
            exploits=pbt,
            score_noise=noise,
            seed=seed,
        )

    # Trials in step tie by progress: nobody clones. With noise in the scores, the lower
    # ones clone a donor that outscored them, often one that has trained no further.
    assert run([slow] * 8, 0.0).clones == 0
    noisy = [run([slow] * 8, 4.0, seed) for seed in range(4)]
    assert all(o.clones > 0 and 0 < o.clones_back < o.clones for o in noisy)
    # A clone back repeats iterations: more train() calls than the trials' own 320 in some run.
    assert any(o.results > 320 for o in noisy)
    # Trials far apart (one ten times faster): noise of an iteration or two hardly changes
    # who clones whom, and no clone goes back far: the calls stay below those of no PBT.
    apart = [(0.1, 0.1), slow, slow, slow, slow, slow, slow, slow]
    exact, blurred = run(apart, 0.0), run(apart, 1.0)
    assert exact.clones_back == 0 and blurred.results < 320 and exact.results < 320
    # The plan says so when the clones repeat more iterations than they skip.
    plain = forecast(costs(0.5), trials=8, at_once=8, cores=8, iterations=40)
    lines = "\n".join(forecast_lines(replace(plain, results=340.0)))
    assert "PBT's exploits repeat ~6% more than the 320 iterations: ~340 train() calls" in lines


def _pbt_of_eight(
    draws: list[tuple[float, float]],
    seed: int = 0,
    *,
    noise: float = 1.0,
    learn: float = 0.0,
    ceiling: float = math.inf,
) -> Outcome:
    """Eight trials at once on eight cores, 40 iterations each, PBT every 4 iterations
    with a quarter cloning, nothing outside train()."""
    return simulate(
        Costs(processes=1, start_s=0.0, rest_s=0.0, driver_s=0.0),
        draws,
        at_once=8,
        cores=8,
        iterations=40,
        exploits=Exploits(interval=4, quantile=0.25),
        seed=seed,
        score_noise=noise,
        learn_exponent=learn,
        score_ceiling=ceiling,
    )


def test_a_train_that_learns_more_a_batch_can_outrank_trials_that_iterated_further() -> None:
    # One member's train() does four times the others' learning work (more epochs): it
    # iterates a quarter as fast.
    draws = [(4.0, 4.0)] + [(1.0, 1.0)] * 7

    def run(learn: float, seed: int) -> Outcome:
        return _pbt_of_eight(draws, seed, learn=learn)

    # Progress by calls: the dear member trails, is cloned to a cheap one (its cost with
    # it) at its first decision, and the run ends when the cheap ones do.
    by_calls = [run(0.0, seed) for seed in range(4)]
    assert all(o.clones_back == 0 and o.wall_s < 60 for o in by_calls)
    # Progress by the work a call learns from (its CPU over the draws' mean): the dear
    # member keeps pace in score, nobody clones it away, and the run lasts its 40 calls
    # of 4 s. Above 1 it leads, and the cheap ones behind it in score clone back to it.
    by_work = [run(1.0, seed) for seed in range(4)]
    assert all(o.wall_s == pytest.approx(160.0, abs=5.0) for o in by_work)
    leading = [run(1.5, seed) for seed in range(4)]
    assert sum(o.clones_back for o in leading) >= 3
    assert sum(o.results for o in leading) > sum(o.results for o in by_calls)
    # Equal draws: whatever the exponent, every call counts one iteration.
    equal = [(1.0, 1.0)] * 8
    assert _pbt_of_eight(equal, noise=2.0, learn=1.0) == _pbt_of_eight(equal, noise=2.0)


def test_past_the_score_ceiling_members_far_ahead_clone_back_as_often_as_forward() -> None:
    # Half the members iterate twice as fast: with no ceiling they lead in score by as much
    # as they lead in iterations, and no noise of an iteration turns that round.
    draws = [(0.5, 0.5)] * 4 + [(1.0, 1.0)] * 4

    def run(ceiling: float, seed: int) -> Outcome:
        return _pbt_of_eight(draws, seed, ceiling=ceiling)

    rising = [run(math.inf, seed) for seed in range(6)]
    level = [run(10.0, seed) for seed in range(6)]
    # Once every member has 10 iterations of progress, the scores tie but for the noise:
    # the fast members clone back to the slow ones (repeating calls), as the slow ones to
    # them.
    assert sum(o.clones_back for o in rising) <= 1
    assert sum(o.clones_back for o in level) >= 6
    assert sum(o.results for o in level) > sum(o.results for o in rising)
    # A ceiling no member reaches changes nothing.
    assert run(1000.0, 0) == run(math.inf, 0)


def test_a_rule_that_clones_only_over_a_clear_gain_clones_a_share_of_the_decisions() -> None:
    sim = Costs(processes=1, start_s=0.0, rest_s=0.0, driver_s=0.0)
    draws = [(0.1, 0.1), (1.0, 1.0), (1.0, 1.0), (1.0, 1.0)]
    tested = Exploits(interval=4, quantile=0.25, tested=True)

    def calls(exploits: Exploits, share: float) -> list[float]:
        return [
            simulate(
                sim,
                draws,
                at_once=4,
                cores=4,
                iterations=40,
                exploits=exploits,
                seed=seed,
                clone_share=share,
            ).results
            for seed in range(8)
        ]

    every = calls(tested, 1.0)
    # None of the decisions clones: every trial runs all its iterations.
    assert calls(tested, 0.0) == [160.0] * 8
    # Half of them: fewer skipped iterations than when every one clones.
    half = calls(tested, 0.5)
    assert max(every) < 160 and sum(every) < sum(half) < 8 * 160
    # A share is the test's: an untested rule (Tune's truncation) clones at every one.
    untested = Exploits(interval=4, quantile=0.25)
    assert calls(untested, 0.0) == every
    # The plan reads which rule it is from the experiment's scheduler section: the
    # shipped default tests the gain (Welch); "none" with no margin and no sparing does not.
    rule = {"type": "pbt", "perturbation_interval": 4, "quantile_fraction": 0.25}
    shipped = TypeAdapter(SchedulerSection).validate_python(rule)
    assert exploits_of(shipped) == tested
    plain = TypeAdapter(SchedulerSection).validate_python({**rule, "exploit_test": "none"})
    assert exploits_of(plain) == untested
    margin = {**rule, "exploit_test": "none", "exploit_min_gain": 5.0}
    assert exploits_of(TypeAdapter(SchedulerSection).validate_python(margin)) == tested


def test_the_iteration_cost_is_the_mean_over_the_searched_hyperparameters(
    tmp_path: Path,
) -> None:
    plan = make_plan(resolved(tmp_path, HALF_CPU), cluster("cpus=2"))
    assert plan.config is not None and plan.resolved is not None
    space = parse_search_space(
        {"num_epochs": {"choice": [2, 6]}, "minibatch_size": {"choice": [50, 100]}}
    )
    rate = Throughput(0, 1e4, None, None, True, per_core=1e4, learner_costs=(1e-5, 1e-3))
    plan.config.training(train_batch_size_per_learner=1000)
    draws = iteration_costs(space, plan.config, rate)
    assert draws is not None and list(draws) == sorted(draws)
    cpu = sum(c for c, _ in draws) / len(draws)
    # E[epochs] 4; E[minibatches] (20 + 10) / 2 = 15; independent draws.
    expected = 1000 / 1e4 + 4 * (1000 * 1e-5 + 15 * 1e-3)
    assert cpu == pytest.approx(expected, rel=0.05)
    assert all(c == pytest.approx(w) for c, w in draws)  # no env runners: one process
    # The cheapest draw (2 epochs of 10 minibatches) and the dearest (6 of 20).
    assert draws[0][0] == pytest.approx(0.1 + 2 * (0.01 + 0.01))
    assert draws[-1][0] == pytest.approx(0.1 + 6 * (0.01 + 0.02))
    replaying = Throughput(0, 1e4, None, None, True, per_core=1e4, learner_costs=None)
    assert iteration_costs(space, plan.config, replaying) is None


def test_a_measured_start_prices_the_trials_start_relative_to_the_constants_own(
    tmp_path: Path,
) -> None:
    plan = make_plan(resolved(tmp_path, HALF_CPU), cluster("cpus=2"))
    assert plan.config is not None and plan.resolved is not None
    space = plan.resolved.search_space
    rate = Throughput(0, 1e4, None, None, True, per_core=1e4, learner_costs=(1e-5, 1e-3))
    constants = Constants(start_s=6.0, start_alone_s=4.0, start_per_process=0.05)
    documented = trial_costs(space, plan.config, rate, processes=1, constants=constants)
    assert documented is not None
    assert documented.start_s == 6.0 and documented.start_measured_s is None
    # A machine on which a fresh process starts in 8 CPU s alone, twice the constants' 4:
    # a trial's start is twice their 6, and among the population's 4 trials on what Ray
    # leaves of 2 cores (about 2 processes a core) about 10% more.
    slow = replace(rate, start_cpu_s=8.0)
    measured = trial_costs(space, plan.config, slow, processes=1, constants=constants)
    assert measured is not None
    assert measured.start_s == pytest.approx(12.0) and measured.start_measured_s == 8.0
    lines = forecast_lines(forecast(measured, trials=4, at_once=4, cores=2, iterations=10))
    assert measured.start_per_process == 0.05
    assert (
        "a trial process's start: ~13.2 CPU s among the 4 trial processes starting together, "
        "from a fresh process's 8 "
    ) in ("\n".join(lines))
    late = forecast(measured, trials=4, at_once=4, cores=2, iterations=10)
    early = forecast(documented, trials=4, at_once=4, cores=2, iterations=10)
    assert late.before > early.before and late.wall_s > early.wall_s


def test_a_crowd_measured_here_prices_a_crowded_train_and_no_dearer_past_it(
    tmp_path: Path,
) -> None:
    plan = make_plan(resolved(tmp_path, HALF_CPU), cluster("cpus=2"))
    assert plan.config is not None and plan.resolved is not None
    space = plan.resolved.search_space
    rate = Throughput(0, 1e4, None, None, True, per_core=1e4, learner_costs=(1e-5, 1e-3))
    constants = Constants(train_per_process=0.1)
    documented = trial_costs(space, plan.config, rate, processes=1, constants=constants)
    assert documented is not None and not documented.crowd_measured
    assert documented.train_per_process == 0.1 and documented.crowd_saturation == math.inf
    # The probe's train() among 2 processes a core cost 1.3 times its cost alone: 15% more
    # a process a core up to 2, and 1.3 times among any more.
    crowded = replace(rate, crowd=(2.0, 1.3))
    measured = trial_costs(space, plan.config, crowded, processes=1, constants=constants)
    assert measured is not None and measured.crowd_measured
    assert measured.train_per_process == pytest.approx(0.15)
    assert measured.crowd_saturation == 2.0
    common = {"trials": 32, "at_once": 32, "cores": 2, "iterations": 10}
    sim = Costs(1, 0.0, 0.0, 0.0, train_per_process=0.15, crowd_saturation=2.0)
    assert sim.dearer(1.0) == pytest.approx(1.15)
    assert sim.dearer(16.0) == sim.dearer(2.0) == pytest.approx(1.3)
    # At 16 processes a core the documented line prices a train() 2.6 times its own; the
    # measured crowd 1.3 times: the population takes about half the time.
    line = forecast(documented, **common)
    flat = forecast(measured, **common)
    assert flat.wall_s < 0.6 * line.wall_s
    text = "\n".join(forecast_lines(flat))
    assert (
        "among the population's 16 trial processes a core a train() costs ~1.3 times its cost "
        "alone (measured by --probe: 1.3 times among 2 processes a core, and no dearer among "
        "more)"
    ) in " ".join(text.split())
    assert "the documented line" in "\n".join(forecast_lines(line))
    # A ratio under 1 (a noisy machine) makes a crowd no cheaper than alone.
    cheaper = trial_costs(space, plan.config, replace(rate, crowd=(2.0, 0.9)), processes=1)
    assert cheaper is not None and cheaper.train_per_process == 0.0


def test_the_short_evaluations_are_priced_into_each_train_from_the_probes_step(
    tmp_path: Path,
) -> None:
    from workbench.plan.start_probe import ProcessProbe, evaluation_cpu_s, with_process

    plan = make_plan(resolved(tmp_path, HALF_CPU), cluster("cpus=2"))
    assert plan.config is not None and plan.resolved is not None
    exp = plan.resolved.experiment
    assert (exp.evaluation.every, exp.evaluation.short_episodes) == (2, 10)
    # 10 episodes at once on one vector env, run to the env's step limit of 500 steps at
    # 1 ms a step, every second train(): 0.25 CPU s a train().
    probe = ProcessProbe(
        start_cpu_s=4.0,
        train_cpu_s=1.0,
        crowd_train_cpu_s=1.2,
        crowd=4,
        cores=2,
        eval_step_s=1e-3,
        eval_steps=500,
        step_limited=True,
    )
    assert evaluation_cpu_s(probe, exp) == pytest.approx(0.25)
    never = exp.model_copy(update={"evaluation": exp.evaluation.model_copy(update={"every": 0})})
    assert evaluation_cpu_s(probe, never) == 0.0
    assert evaluation_cpu_s(replace(probe, eval_step_s=None), exp) == 0.0
    rate = Throughput(0, 1e4, None, None, True, per_core=1e4, learner_costs=(1e-5, 1e-3))
    probed = with_process(rate, probe, exp)
    assert probed.start_cpu_s == 4.0 and probed.evaluation_s == pytest.approx(0.25)
    assert probed.crowd == (2.0, pytest.approx(1.2))
    # Each train() of the trial's main process pays them, in CPU and in wall time.
    bare = iteration_costs(plan.resolved.search_space, plan.config, rate)
    priced = iteration_costs(plan.resolved.search_space, plan.config, probed)
    assert bare is not None and priced is not None
    assert all(
        p == (pytest.approx(c + 0.25), pytest.approx(w + 0.25))
        for p, (c, w) in zip(priced, bare, strict=True)
    )
    # No crowd measured: no crowd in the figures.
    assert with_process(rate, replace(probe, crowd_train_cpu_s=None), exp).crowd is None


def test_the_probe_trains_among_two_processes_a_core_within_the_memory_available() -> None:
    from workbench.plan.start_probe import ProcessProbe, crowd_size

    gib = 1 << 30
    assert crowd_size(2, 20 * gib) == 4
    assert crowd_size(64, 512 * gib) == 64  # at most 64
    assert crowd_size(16, 10 * gib) == 10  # a GiB each
    assert crowd_size(1, None) == 2 and crowd_size(8, gib // 2) == 2  # at least 2
    probe = ProcessProbe(start_cpu_s=4.0, train_cpu_s=1.0, crowd_train_cpu_s=1.5, crowd=4, cores=2)
    assert probe.per_core == 2.0 and probe.crowd_ratio == pytest.approx(1.5)
    assert ProcessProbe(start_cpu_s=4.0).crowd_ratio is None


def test_a_population_pays_for_its_own_first_draws_not_the_distributions_quantiles() -> None:
    # The searched distribution spans a 20x spread; this population of 4 drew its cheapest.
    spread = tuple((x, x) for x in (0.2, 0.4, 0.8, 1.6, 3.2, 4.0))
    base = costs(iterations=spread, driver_s=0.0, result_s=0.0)
    own = replace(base, drawn=((0.2, 0.2),) * 4)
    quantiles = forecast(base, trials=4, at_once=4, cores=64, iterations=40)
    drawn = forecast(own, trials=4, at_once=4, cores=64, iterations=40)
    # A core each: every trial takes its start and 40 of its own train() calls.
    assert drawn.wall_s == pytest.approx(8.0 + 40 * 0.2)
    assert quantiles.wall_s == pytest.approx(8.0 + 40 * 4.0)  # the dearest quantile's
    # Its draws are taken in the run's order; another population size takes the quantiles.
    assert own.trial_draws(4) == ([(0.2, 0.2)] * 4, True)
    assert own.trial_draws(6) == (base.quantiles(6), False)
    lines = forecast_lines(drawn)
    assert "~0.2 s for this population's own first draws, which the forecast uses" in lines[1]
    assert "own first draws" not in forecast_lines(quantiles)[1]


def test_the_plan_prices_the_trials_the_run_will_draw(tmp_path: Path) -> None:
    space = {"num_epochs": {"randint": [3, 20]}, "minibatch_size": {"choice": [64, 512]}}
    source = resolved(tmp_path, HALF_CPU, population=6, search_space={"params": space})
    plan = make_plan(source, cluster("cpus=2"))
    assert plan.forecast is not None and plan.config is not None
    # The run's own draws (`workbench run --dry-run`'s), priced one by one in its order.
    planned = [values for _, values in planned_trials(source)]
    assert len({(v["num_epochs"], v["minibatch_size"]) for v in planned}) > 1
    rate = plan.throughput
    assert rate is not None
    assert plan.forecast.costs.drawn == drawn_costs(planned, plan.config, rate)
    # Each priced as iteration_costs prices a draw: sampling the batch, then its epochs.
    batch = float(plan.config.train_batch_size_per_learner)
    assert rate.learner_costs is not None
    per_sample, per_minibatch = rate.learner_costs
    for values, (cpu, _) in zip(planned, plan.forecast.costs.drawn, strict=True):
        learn = values["num_epochs"] * (
            batch * per_sample + math.ceil(batch / values["minibatch_size"]) * per_minibatch
        )
        assert cpu == pytest.approx(batch / rate.per_core + learn)
    # A value the space does not search is the config's own.
    fixed = drawn_costs([{"num_epochs": 5}], plan.config, rate)
    assert fixed is not None
    minibatch = float(plan.config.minibatch_size or batch)
    learn = 5 * (batch * per_sample + math.ceil(batch / minibatch) * per_minibatch)
    assert fixed[0][0] == pytest.approx(batch / rate.per_core + learn)


def test_iterations_come_from_the_stop_rule(tmp_path: Path) -> None:
    exp = resolved(tmp_path, HALF_CPU, stop={"iterations": 30, "env_steps": 4000}).experiment
    assert iterations_of(exp.stop, 200) == 20
    assert iterations_of(exp.stop, 100) == 30
    exp = resolved(tmp_path, HALF_CPU, stop={"wall_time_s": 60}).experiment
    assert iterations_of(exp.stop, 200) is None


def test_a_population_budget_ends_every_trial_at_once_so_none_waits_for_the_slowest() -> None:
    sim = Costs(processes=1, start_s=0.0, rest_s=0.0, driver_s=0.0)
    draws = [(0.1, 0.1), (0.1, 0.1), (1.0, 1.0), (1.0, 1.0)]
    each = simulate(sim, draws, at_once=4, cores=4, iterations=40, exploits=None)
    assert each.results == 160 and each.wall_s == pytest.approx(40.0)
    # The same 160 train() calls as a budget for the population: the fast trials go on
    # while the slow ones train, and the run ends when the driver has the 160th result.
    pooled = simulate(sim, draws, at_once=4, cores=4, iterations=None, exploits=None, budget=160)
    assert pooled.results == 160
    assert pooled.wall_s < each.wall_s / 2
    assert pooled.train_s / (4 * pooled.wall_s) > 0.95 > each.train_s / (4 * each.wall_s)
    # Whichever ends first: a budget larger than the iterations allow changes nothing.
    assert (
        simulate(sim, draws, at_once=4, cores=4, iterations=40, exploits=None, budget=1000) == each
    )
    with pytest.raises(ValueError, match="budget"):
        simulate(sim, draws, at_once=4, cores=4, iterations=None, exploits=None)


def test_the_plan_forecasts_a_population_under_an_env_step_budget(tmp_path: Path) -> None:
    exp = resolved(tmp_path, HALF_CPU, stop={"population_env_steps": 16_000}).experiment
    assert budget_of(exp.stop, 200) == 80 and iterations_of(exp.stop, 200) is None
    assert budget_of(resolved(tmp_path, HALF_CPU).experiment.stop, 200) is None
    c = costs(iterations=((0.1, 0.1), (0.9, 0.9)))
    pooled = forecast(c, trials=8, at_once=8, cores=2, iterations=None, budget=320)
    each = forecast(c, trials=8, at_once=8, cores=2, iterations=40)
    assert pooled.budget == 320 and pooled.iterations_given
    assert pooled.results == pytest.approx(320, abs=1)
    assert pooled.outside < each.outside
    assert "8 trials sharing 320 iterations (the env-step budget)" in forecast_lines(pooled)[4]
    path = experiment(tmp_path, HALF_CPU, stop={"population_env_steps": 64_000}, population=8)
    code, out, _ = run_cli("plan", str(path), "--cluster", "cpus=2,nodes=4", "--json")
    data = json.loads(out)["forecast"]
    assert code == 0 and data["population_iterations"] is not None
    assert data["train_calls"] == pytest.approx(data["population_iterations"], rel=0.02)


def test_the_plan_prices_a_budget_for_the_population_where_trials_have_cores_of_their_own(
    tmp_path: Path,
) -> None:
    spread = {"num_epochs": {"choice": [1, 30]}, "lr": {"loguniform": [1e-4, 1e-3]}}
    exp = resolved(
        tmp_path,
        HALF_CPU,
        population=8,
        stop={"iterations": 40},
        search_space={"params": spread},
        scheduler={"type": "pbt", "perturbation_interval": 4},
    )
    own = make_plan(exp, cluster("cpus=2,nodes=8"))  # 16 cores for 8 one-process trials
    each = own.forecast
    assert each is not None and each.pooled is not None and each.after > 0.1
    pooled = each.pooled
    batch = float(own.config.train_batch_size_per_learner)
    # The same train() calls (PBT's skipped iterations sample nothing), as env steps.
    assert each.pooled_env_steps == math.ceil(each.results) * batch
    # The run ends on the result that spends the budget; calls other trials ended before the
    # driver handled it are counted (they ran), at most one a trial.
    assert math.ceil(each.results) <= pooled.results <= math.ceil(each.results) + 8
    # The members that draw the dear epochs no longer hold the others' slots idle.
    assert pooled.wall_s < each.wall_s and pooled.after < each.after / 4
    lines = forecast_lines(each)
    assert lines[-1].startswith(
        f"  as a budget for the whole population instead (stop: population_env_steps: "
        f"{each.pooled_env_steps}, the same env steps): "
    )
    assert "more iterations a second" in lines[-1]
    # Not on cores the trials share: there the first to finish hand theirs to the others.
    nodes = [
        {
            "Alive": True,
            "NodeManagerAddress": "127.0.0.1",
            "NodeID": f"{i}",
            "Resources": {"CPU": 2},
        }
        for i in range(4)
    ]
    loopback = cluster_from_ray_nodes(nodes, "four nodes on this machine")
    shared = make_plan(exp, loopback).forecast
    assert shared is not None and shared.pooled is None
    assert "as a budget" not in "\n".join(forecast_lines(shared))
    # Nor where the stop is already a budget, or is not in iterations.
    for stop in ({"population_env_steps": 64_000}, {"wall_time_s": 60}):
        other = make_plan(
            resolved(tmp_path, HALF_CPU, population=8, stop=stop), cluster("cpus=2,nodes=8")
        )
        assert other.forecast is not None and other.forecast.pooled is None
    path = experiment(tmp_path, HALF_CPU, population=8, stop={"iterations": 40})
    code, out, _ = run_cli("plan", str(path), "--cluster", "cpus=2,nodes=8", "--json")
    data = json.loads(out)["forecast"]
    assert code == 0 and 0 <= data["after_last_result"] < data["outside_train"]
    assert data["pooled"]["population_env_steps"] > 0 and data["pooled"]["wall_s"] > 0


def test_plan_prints_the_forecast_and_puts_it_in_its_json(tmp_path: Path) -> None:
    path = experiment(tmp_path, HALF_CPU, stop={"iterations": 40}, population=8)
    code, out, _ = run_cli("plan", str(path), "--cluster", "cpus=2,nodes=4")
    assert code == 0
    assert "Population forecast (documented rates for train()" in out
    assert "8 trials x 40 iterations, 8 at once on 8 cores" in out
    code, out, _ = run_cli("plan", str(path), "--cluster", "cpus=2,nodes=4", "--json")
    data = json.loads(out)["forecast"]
    assert data["iterations_per_trial"] == 40 and data["cores"] == 8
    assert 0 < data["outside_train"] < 1 and data["iterations_per_s"] > 0
    # The same population on one core is bound by it.
    one = make_plan(resolved(tmp_path, HALF_CPU, population=8), cluster("cpus=1", "cpus=3"))
    assert one.forecast is not None and one.forecast.cores == 4


def test_nodes_on_this_machine_share_its_cores() -> None:
    def node(host: str) -> dict[str, Any]:
        return {"Alive": True, "NodeManagerAddress": host, "NodeID": "ab", "Resources": {"CPU": 8}}

    cores = os.cpu_count() or 1
    here = [node("192.0.2.2"), node("192.0.2.2")]
    local = cluster_from_ray_nodes(here, "this machine's nodes", local_host="192.0.2.2")
    assert local.totals["CPU"] == 16 and local.cores == min(16, cores)
    loopback = cluster_from_ray_nodes([node("127.0.0.1")], "loopback", local_host="192.0.2.2")
    assert loopback.cores == min(8, cores)
    mixed = cluster_from_ray_nodes([*here, node("10.0.0.1")], "mixed", local_host="192.0.2.2")
    assert mixed.cores == 8 + min(16, cores)
    remote = cluster_from_ray_nodes([node("10.0.0.1"), node("10.0.0.2")], "two hosts")
    assert remote.cores == 16


def test_plan_says_how_many_bundles_each_node_holds_and_which_trials_span_nodes(
    tmp_path: Path,
) -> None:
    # A trial of CPU 2.5 (main process 0.5, two runners of 1) cannot stay on a 2-CPU node.
    runners = {"cpus_main": 0.5, "cpus_per_learner": 0, "env_runners": {"count": 2}}
    plan = make_plan(resolved(tmp_path, runners, population=3), cluster("cpus=2,nodes=4"))
    assert plan.concurrent == 3 and plan.spanning == 3
    assert sum(plan.bundles_per_node().values()) == 9
    assert all(len(where) == 3 for where in plan.placements)
    assert "(3 trials across nodes)" in "\n".join(plan.lines())
    # Half-CPU trials pack: each on one node.
    packed = make_plan(resolved(tmp_path, HALF_CPU, population=8), cluster("cpus=2,nodes=2"))
    assert packed.spanning == 0 and packed.bundles_per_node() == {"node 1": 4, "node 2": 4}


def test_the_plan_places_groups_where_ray_does() -> None:
    # Ray's scorer sends each group to the emptiest node: six one-CPU trials on four
    # 2-CPU nodes go 2/2/1/1 (Ray placed them so at population 6), not 2/2/2/0.
    one_cpu = TrialRequest((Bundle("main process", {"CPU": 1.0}),), "PACK")
    fit = concurrent_trials(one_cpu, cluster("cpus=2,nodes=4"), 6)
    assert [len(set(where)) for where in fit.placements] == [1] * 6
    assert sorted(Counter(w[0] for w in fit.placements).values()) == [1, 1, 2, 2]
    # PACK fills the chosen node with the group's later bundles before it takes another.
    runners = TrialRequest(
        (
            Bundle("main process", {"CPU": 0.5}),
            *[Bundle(f"env runner {i}", {"CPU": 1.0}) for i in (1, 2)],
        ),
        "PACK",
    )
    free = [{"CPU": 2.0}, {"CPU": 3.0}]
    assert ray_place(runners, free) == [1, 1, 1]
    assert ray_place(runners, [{"CPU": 2.0}, {"CPU": 1.5}]) == [1, 0, 0]
    # SPREAD takes a node not used yet while one fits; STRICT_SPREAD only those.
    spread = TrialRequest(runners.bundles, "SPREAD")
    assert sorted(ray_place(spread, [{"CPU": 4.0}] * 2) or []) == [0, 0, 1]
    assert ray_place(TrialRequest(runners.bundles, "STRICT_SPREAD"), [{"CPU": 4.0}] * 2) is None
    # A GPU bundle goes first, to the node with the GPU.
    gpu = TrialRequest(
        (Bundle("main process", {"CPU": 1.0}), Bundle("learner 1", {"GPU": 1.0})), "PACK"
    )
    assert ray_place(gpu, [{"CPU": 8.0}, {"CPU": 2.0, "GPU": 1.0}]) == [1, 1]


def test_the_probe_separates_the_cost_per_sample_from_the_cost_per_minibatch() -> None:
    from workbench.plan.throughput import _two_point

    def epoch_s(size: int) -> float:  # 20 us a sample, 2 ms a minibatch
        return 2000 * 20e-6 + math.ceil(2000 / size) * 2e-3

    per_sample, per_minibatch = _two_point(2000, 64, 512, epoch_s)
    assert per_sample == pytest.approx(20e-6) and per_minibatch == pytest.approx(2e-3)
    # One minibatch size searched: no second point, all of it per sample.
    assert _two_point(2000, 512, 512, epoch_s) == (pytest.approx(epoch_s(512) / 2000), 0.0)


def test_the_probe_measures_with_the_torch_threads_a_trial_gets() -> None:
    from ray.rllib.algorithms.ppo import PPOConfig

    from workbench.plan.throughput import _trial_threads
    from workbench.trial.callbacks import callbacks_class

    def config(threads: int | None, **learners: Any) -> Any:
        return (
            PPOConfig()
            .callbacks(callbacks_class(torch_threads=threads))
            .env_runners(num_env_runners=4, num_cpus_per_env_runner=2)
            .resources(num_cpus_for_main_process=3)
            .learners(**learners)
        )

    # The small_env defaults fix the threads of every trial process.
    assert _trial_threads(config(1, num_learners=0)) == (1, 1)
    # Otherwise Ray's rule: each actor's whole CPUs, at least one. The learner in the main
    # process gets that process's bundle, a remote one its own (none with a GPU: one thread).
    assert _trial_threads(config(None, num_learners=0)) == (2, 3)
    assert _trial_threads(config(None, num_learners=1, num_cpus_per_learner=4)) == (2, 4)
    assert _trial_threads(config(None, num_learners=1, num_gpus_per_learner=1)) == (2, 1)
    assert _trial_threads(config(None, num_learners=1, num_cpus_per_learner=0.5)) == (2, 1)
    runners_none = config(None, num_learners=0).env_runners(num_env_runners=0)
    assert _trial_threads(runners_none) == (3, 3)


def test_the_probe_times_each_update_on_its_own_copy_of_the_episodes() -> None:
    from workbench.plan.throughput import _UpdateTimer

    seen: list[int] = []

    def update(episodes: list[list[int]], **_: Any) -> None:  # as PPO's connectors do
        seen.append(sum(len(e) for e in episodes))
        for episode in episodes:
            episode.append(0)

    episodes = [[0] * 10, [0] * 20]
    timer = _UpdateTimer(update, episodes, 30)
    # The samples an epoch goes over: the connectors' steps included.
    assert timer.trained(8) == 32
    assert timer(8, 3) >= 0
    # Every update saw the batch as sampled (one warm-up, then the mean of five), and the
    # probe's episodes are left as they were.
    assert seen == [30] * 6
    assert episodes == [[0] * 10, [0] * 20]


def test_the_probe_counts_the_learner_connectors_once_a_train_not_once_an_epoch() -> None:
    from workbench.plan.population import _one_train
    from workbench.plan.throughput import _call_part, _two_point

    def update_s(size: int, epochs: int = 1) -> float:  # 30 ms a call, then its epochs
        return 0.03 + epochs * (2000 * 20e-6 + math.ceil(2000 / size) * 2e-3)

    call_s, epoch_s = _call_part(128, update_s)
    assert call_s == pytest.approx(0.03) and epoch_s == pytest.approx(update_s(128) - 0.03)
    costs = _two_point(2000, 64, 512, lambda size: update_s(size) - call_s)
    assert costs == (pytest.approx(20e-6), pytest.approx(2e-3))
    # A train() of 10 epochs pays the connectors once: timed as ten one-epoch updates, it
    # would be priced 0.27 s too dear.
    rate = Throughput(
        0, 1e9, None, None, True, per_core=1e9, learner_costs=costs,
        learner_call_s_per_sample=call_s / 2000,
    )  # fmt: skip
    config = SimpleNamespace(
        train_batch_size_per_learner=2000, num_epochs=10, minibatch_size=128, num_learners=0
    )
    cpu_s, _ = _one_train(rate, config, 2000.0, 10.0, 128.0)
    assert cpu_s == pytest.approx(update_s(128, 10), rel=1e-5)  # sampling: 2 us
    # Without the split (none measured: 0 a sample), a train() is its epochs alone.
    flat = Throughput(0, 1e9, None, None, True, per_core=1e9, learner_costs=costs)
    flat_s, _ = _one_train(flat, config, 2000.0, 10.0, 128.0)
    assert flat_s == pytest.approx(update_s(128, 10) - 0.03, rel=1e-5)
