"""``benchmarks/population_scale.py --calibrate``: the constants of
``workbench/plan/population.py`` that the benchmark's runs give."""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.scale_setup import experiment_scheduler


def calibration(
    rows: list[dict[str, Any]],
    grid: list[tuple[float, ...]] | None = None,
    shipped: Any = None,
) -> dict[str, float]:
    """The constants of workbench/plan/population.py from these runs (each population
    placed at once; the train() costs are their probe's, which the runs carry):

    * measured: the driver's CPU a result (its process's over the runs, a result), and the
      share of a core Ray's own processes kept busy on each node (the median over the runs);
    * fitted first, alone: the noise of the scores about the trials' progress (0 to 32
      iterations) and, under the experiment's tested rule, the share of the decisions with
      a donor that clone (1, 0.95, ..., 0): the pair whose simulated runs come nearest the
      runs' clones and the iterations those skipped net (over the sizes, the sum of each
      size's median; the larger relative error of the two as small as it can be), the
      other constants as shipped (``shipped``: others; the counts hardly depend on them:
      they are figures of the population's scores, not of the machine's speed);
    * fitted: a process's start, a result's fixed wait outside train(), its wait growing
      with the trial processes per core (a factor and an exponent), and how much dearer a
      train() is a process per core: the five, on a grid refined around its best point
      (``grid``: another grid to start from), whose
      simulated runs come nearest the median over each size's rounds of the results per
      second, of the share outside train() (the figures the benchmark's bar judges) and of
      the part of that share before the trials' first results (the largest relative error
      of those, over the sizes, as small as it can be). Without that part, the start is free
      to stand in for whatever the waits between results miss, and the forecast then puts
      the trials' time outside train() in the wrong place.
    """
    from workbench.plan.population import (
        MEASURED,
        Constants,
        TrialCosts,
        exploits_of,
        forecast,
        with_constants,
    )

    probe = rows[0]["forecast"]
    costs = TrialCosts(
        processes=1 + int(rows[0].get("env_runners", 0)),
        start_s=0.0,
        iterations=tuple((float(c), float(w)) for c, w in probe["iteration_costs"]),
        result_s=0.0,
        result_s_per_process=0.0,
        crowd_exponent=1.0,
        train_per_process=0.0,
        driver_s=0.0,
        ray_cores_per_node=0.0,
        clone_share=1.0,
        source="the runs' probe",
    )
    cores = probe["cores"]
    driver = sum(f["driver_cpu_s"] for f in rows) / max(sum(f["results"] for f in rows), 1)
    ray = statistics.median(f["ray_cpu_s"] / f["wall_s"] / f["nodes"] for f in rows)
    exploits = exploits_of(experiment_scheduler())
    groups: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
    for f in rows:  # the rounds of each size
        groups.setdefault((f["size"], f.get("iterations", 40), f["nodes"]), []).append(f)
    measured = {
        key: (
            statistics.median(f["results"] / f["wall_s"] for f in runs),
            statistics.median(f["outside"] for f in runs),
            statistics.median(f["outside_before"] for f in runs),
            statistics.median(f["results"] for f in runs),
            _median_clones(runs),
        )
        for key, runs in groups.items()
    }

    # Each size's own first draws (the same seed every round), where its runs recorded them.
    drawn = {
        key: tuple((float(c), float(w)) for c, w in own)
        if (own := runs[0].get("forecast", {}).get("drawn_costs"))
        else None
        for key, runs in groups.items()
    }

    def forecasts(constants: Constants) -> Iterator[tuple[Any, tuple[float, ...]]]:
        model = with_constants(costs, constants)
        for (size, iterations, nodes), figures in measured.items():
            fc = forecast(
                replace(model, drawn=drawn[(size, iterations, nodes)]),
                trials=size,
                at_once=size,
                cores=cores,
                iterations=iterations,
                exploits=exploits,
                nodes=nodes,
            )
            yield fc, figures

    def clones_error(point: tuple[float, float]) -> float:
        """The larger relative error of the clones and of the calls they skipped."""
        noise, share = point
        constants = replace(
            shipped or MEASURED,
            driver_s=driver,
            ray_cores_per_node=ray,
            clone_share=share,
            score_noise=noise,
        )
        clones = skipped = clones_measured = skipped_measured = 0.0
        for fc, figures in forecasts(constants):
            if math.isnan(figures[4]):  # runs from before the benchmark counted clones
                continue
            all_calls = fc.trials * fc.iterations
            clones += fc.clones
            skipped += all_calls - fc.results
            clones_measured += figures[4]
            skipped_measured += all_calls - figures[3]
        return max(
            abs(clones / clones_measured - 1) if clones_measured > 0 else clones,
            abs(skipped / skipped_measured - 1) if skipped_measured > 0 else abs(skipped),
        )

    score_noise, clone_share = 0.0, 1.0
    if exploits is not None and not all(math.isnan(figures[4]) for figures in measured.values()):
        shares = [i / 20 for i in range(20, -1, -1)] if exploits.tested else [1.0]
        # (Points that fit alike: the least noise, the largest share.)
        noises = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0)
        score_noise, clone_share = min(
            ((noise, share) for noise in noises for share in shares), key=clones_error
        )

    def error(point: tuple[float, ...]) -> float:
        start, rest, crowd, exponent, dearer = point
        constants = Constants(
            start_s=start,
            result_s=rest,
            result_s_per_process=crowd,
            crowd_exponent=exponent,
            train_per_process=dearer,
            driver_s=driver,
            ray_cores_per_node=ray,
            clone_share=clone_share,
            score_noise=score_noise,
        )
        worst = 0.0
        for fc, (rate, outside, before, *_) in forecasts(constants):
            worst = max(
                worst,
                abs(fc.iterations_per_s / rate - 1),
                abs(fc.outside / outside - 1),
                abs(fc.before / before - 1),
            )
        return worst

    # start s, fixed wait s, wait s per (process per core) ** exponent, exponent, train()
    # dearer per process per core
    grid = grid or [
        (2.0 * s, 0.2 * r, k, e, d)
        for s in range(1, 8)
        for r in range(6)
        for k in (0.0, *(0.002 * 2**i for i in range(8)))
        for e in (1.0, 2.0)
        for d in (0.0, 0.02, 0.05, 0.1)
    ]
    best = min(grid, key=error)
    steps = (1.0, 0.1, max(best[2], 0.002) / 2, 0.0, max(best[4], 0.01) / 2)
    for _ in range(3):  # halve the steps around the best point so far
        near = {
            tuple(max(0.0, b + k * step) for b, k, step in zip(best, ks, steps, strict=True))
            for ks in itertools.product((-1, 0, 1), repeat=5)
        }
        best = min(near, key=error)
        steps = tuple(step / 2 for step in steps)
    start, rest, crowd, exponent, dearer = best
    # The start is fitted in these runs' CPU seconds; the model prices it relative to their
    # probe's fresh process alone (nan: runs from before the probe measured it).
    alone = [a for f in rows if (a := f.get("forecast", {}).get("start_alone_s")) is not None]
    return {
        "start_s": start,
        "start_alone_s": statistics.median(alone) if alone else math.nan,
        "result_s": rest,
        "result_s_per_process": crowd,
        "crowd_exponent": exponent,
        "train_per_process": dearer,
        "driver_s": driver,
        "ray_cores_per_node": ray,
        "clone_share": clone_share,
        "score_noise": score_noise,
        "clones_error": clones_error((score_noise, clone_share)),
        "largest_error": error(best),
    }


def _median_clones(runs: list[dict[str, Any]]) -> float:
    """The median count of clones of the runs that counted them (nan: none did)."""
    counts = [f["clones"]["clones"] for f in runs if "clones" in f]
    return float(statistics.median(counts)) if counts else math.nan


def calibrate(rows: list[dict[str, Any]], earlier: list[str]) -> None:
    """Prints the constants these runs and the earlier ones (files --json wrote) give: the
    runs stopped at their iterations over the main experiment's search space (the model's
    budget runs and runs of equal costs are checked, not fitted: the fit prices every run
    from the first run's probe)."""

    def fitted(f: dict[str, Any]) -> bool:
        return (
            "outside_before" in f
            and f.get("stop", "iterations") == "iterations"
            and f.get("costs", "searched") == "searched"
        )

    runs = [f for f in rows if fitted(f)]
    for extra in earlier:
        runs += [f for f in json.loads(Path(extra).read_text()) if fitted(f)]
    if not runs:
        raise SystemExit("--calibrate: no timed runs to fit")
    constants = calibration(runs)
    print(f"\ncalibration on {len(runs)} runs, workbench/plan/population.py's Constants:")
    for name, value in constants.items():
        print(f"  {name} = {value:.4g}")
