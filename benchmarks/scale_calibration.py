"""``benchmarks/population_scale.py --calibrate``: the constants of
``workbench/plan/population.py`` that the benchmark's runs give."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.scale_setup import experiment_data, experiment_scheduler

Key = tuple[int, int, int, str]  # size, iterations, nodes, search space


@dataclass(frozen=True)
class Groups:
    """Runs grouped by size and search space, each group priced from its own first run's
    probe, with the values that set a train()'s cost where that probe recorded what prices
    them (PBT's explore then moves a clone's cost as the forecast's does), and the median
    over its rounds of what the model forecasts: results a second, the share outside
    train(), the part of it before the first results, the train() calls, the clones and
    those to a donor behind. A group's trial start is priced as the run's own forecast
    priced it, from its probe's fresh process alone (``population.start_priced``)."""

    cores: float
    exploits: Any
    costs: dict[Key, Any]
    measured: dict[Key, tuple[float, float, float, float, float, float]]
    alone: dict[Key, float | None]

    @classmethod
    def of(cls, rows: list[dict[str, Any]]) -> Groups:
        from workbench.plan.population import TrialCosts, exploits_of

        probe = rows[0]["forecast"]
        base = TrialCosts(
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
        groups: dict[Key, list[dict[str, Any]]] = {}
        for f in rows:
            key = (f["size"], f.get("iterations", 40), f["nodes"], f.get("costs", "searched"))
            groups.setdefault(key, []).append(f)
        return cls(
            cores=probe["cores"],
            exploits=exploits_of(experiment_scheduler()),
            costs={key: _costs_of(runs[0], base) for key, runs in groups.items()},
            alone={
                key: runs[0].get("forecast", {}).get("start_alone_s")
                for key, runs in groups.items()
            },
            measured={
                key: (
                    statistics.median(f["results"] / f["wall_s"] for f in runs),
                    statistics.median(f["outside"] for f in runs),
                    statistics.median(f["outside_before"] for f in runs),
                    statistics.median(f["results"] for f in runs),
                    _median_clones(runs),
                    _median_clones(runs, "back"),
                )
                for key, runs in groups.items()
            },
        )

    def forecasts(self, constants: Any) -> Iterator[tuple[Key, Any, tuple[float, ...]]]:
        """Each group's key, the model's forecast of it on ``constants``, its figures."""
        from workbench.plan.population import forecast, start_priced, with_constants

        for key, figures in self.measured.items():
            size, iterations, nodes, _ = key
            fc = forecast(
                with_constants(self.costs[key], start_priced(constants, self.alone[key])),
                trials=size,
                at_once=size,
                cores=self.cores,
                iterations=iterations,
                exploits=self.exploits,
                nodes=nodes,
            )
            yield key, fc, figures


def errors(runs: Groups, constants: Any) -> dict[Key, tuple[float, float, float]]:
    """Each group's errors (forecast / measured - 1) on ``constants``: results a second,
    the share outside train() (the bar's two figures) and the part before the first
    results."""
    return {
        key: (
            fc.iterations_per_s / rate - 1,
            fc.outside / outside - 1,
            fc.before / before - 1,
        )
        for key, fc, (rate, outside, before, *_) in runs.forecasts(constants)
    }


# The points (score noise, clone share, learn exponent, score ceiling) the fit of the clones
# tries, in its order of preference where they fit alike: no ceiling, progress by calls, the
# least noise, the largest share. (The share is 1 under a rule that clones at every rank.)
CLONE_GRID = [
    (noise, share, learn, ceiling)
    for ceiling in (math.inf, 20.0, 12.0, 8.0)
    for learn in (0.0, 0.5, 1.0)
    for noise in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0)
    for share in (1.0, 0.9, 0.8, 0.7, 0.65, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)
]


def calibration(
    rows: list[dict[str, Any]],
    grid: list[tuple[float, ...]] | None = None,
    shipped: Any = None,
    keep_clones: bool = False,
    clone_grid: list[tuple[float, float, float, float]] | None = None,
) -> dict[str, float]:
    """The constants of workbench/plan/population.py from these runs (each population
    placed at once; the train() costs are their probe's, which the runs carry):

    * measured: the driver's CPU a result (its process's over the runs, a result), the
      share of a core Ray's own processes kept busy on each node, a trial's own CPU for
      each result outside train() (the medians over the runs: ``result_cpu_s``), and the
      run's end after its last result (``measured_end``);
    * fitted first, alone: the noise of the scores about the trials' progress (0 to 32
      iterations), what a train() counts toward that progress (its CPU over the draws' mean
      to the power 0, 0.5 or 1), the progress past which a score rises no further (none,
      20, 12 or 8 iterations) and, under the experiment's tested rule, the share of the
      decisions with a donor that clone (1, 0.9, ..., 0): the four (``clone_grid``: other
      points to try, ``CLONE_GRID``'s order of preference) whose simulated
      runs come nearest the runs' clones, those to a donor behind, and the iterations
      they skipped net (over the sizes, the sum of each size's median; the largest
      relative error of those as small as it can be), the
      other constants as shipped (``shipped``: others; the counts hardly depend on them:
      they are figures of the population's scores, not of the machine's speed), or with
      ``keep_clones`` the shipped four;
    * measured where the runs carry it (``start_cpu_s``: each trial process's CPU when its
      first train() began): a process's start, as a line in the trial processes per core
      through each run's ratio of its median start to its probe's fresh process alone
      (``measured_start``): the line's ratio with no crowd times the median of the probes'
      starts, and the fraction more per process a core (``start_per_process``);
    * fitted: a process's start (where not measured), a result's fixed wait outside
      train(), its wait growing with the trial processes per core (a factor and an
      exponent), and how much dearer a train() is a process per core: the five, on a grid
      refined around its best point (``grid``: another grid to start from), whose
      simulated runs come nearest the median over each size's rounds of the results per
      second, of the share outside train() (the figures the benchmark's bar judges) and of
      the part of that share before the trials' first results (the largest relative error
      of those, over the sizes, as small as it can be). Without that part, the start is free
      to stand in for whatever the waits between results miss, and the forecast then puts
      the trials' time outside train() in the wrong place.
    """
    from workbench.plan.population import MEASURED, Constants

    runs = Groups.of(rows)
    driver = sum(f["driver_cpu_s"] for f in rows) / max(sum(f["results"] for f in rows), 1)
    ray = statistics.median(f["ray_cpu_s"] / f["wall_s"] / f["nodes"] for f in rows)
    shipped = shipped or MEASURED
    per_result = [c for f in rows if (c := result_cpu(f, shipped)) is not None]
    result_cpu_s = statistics.median(per_result) if per_result else 0.0
    alone = [a for f in rows if (a := f.get("forecast", {}).get("start_alone_s")) is not None]
    start_line = measured_start(rows, ray)
    end_s = measured_end(rows)
    if end_s is None:
        end_s = shipped.end_s
    start_per_process = start_line[1] if start_line is not None else shipped.start_per_process

    def clones_error(point: tuple[float, float, float, float]) -> float:
        """The largest relative error of the clones, those back and the calls skipped."""
        noise, share, learn, ceiling = point
        constants = replace(
            shipped,
            driver_s=driver,
            ray_cores_per_node=ray,
            result_cpu_s=result_cpu_s,
            clone_share=share,
            score_noise=noise,
            learn_exponent=learn,
            score_ceiling=ceiling,
            start_per_process=start_per_process,
            end_s=end_s,
        )
        clones = skipped = back = clones_measured = skipped_measured = back_measured = 0.0
        for _, fc, figures in runs.forecasts(constants):
            if math.isnan(figures[4]):  # runs from before the benchmark counted clones
                continue
            all_calls = fc.trials * fc.iterations
            clones += fc.clones
            skipped += all_calls - fc.results
            clones_measured += figures[4]
            skipped_measured += all_calls - figures[3]
            if not math.isnan(figures[5]):
                back += fc.clones_back
                back_measured += figures[5]
        return max(
            abs(clones / clones_measured - 1) if clones_measured > 0 else clones,
            # (Net: the clones back can repeat more calls than those ahead skip.)
            abs(skipped / skipped_measured - 1) if skipped_measured != 0 else abs(skipped),
            abs(back / back_measured - 1) if back_measured > 0 else 0.0,
        )

    score_noise, clone_share = 0.0, 1.0
    learn_exponent, score_ceiling = 0.0, math.inf
    if keep_clones:
        score_noise, clone_share = shipped.score_noise, shipped.clone_share
        learn_exponent, score_ceiling = shipped.learn_exponent, shipped.score_ceiling
    elif runs.exploits is not None and not all(
        math.isnan(figures[4]) for figures in runs.measured.values()
    ):
        tested = runs.exploits.tested
        score_noise, clone_share, learn_exponent, score_ceiling = min(
            [p for p in clone_grid or CLONE_GRID if tested or p[1] == 1.0], key=clones_error
        )

    def error(point: tuple[float, ...]) -> float:
        start, rest, crowd, exponent, dearer = point
        constants = Constants(
            start_s=start,
            start_alone_s=statistics.median(alone) if alone else math.nan,
            result_s=rest,
            result_s_per_process=crowd,
            crowd_exponent=exponent,
            train_per_process=dearer,
            driver_s=driver,
            ray_cores_per_node=ray,
            result_cpu_s=result_cpu_s,
            clone_share=clone_share,
            score_noise=score_noise,
            learn_exponent=learn_exponent,
            score_ceiling=score_ceiling,
            start_per_process=start_per_process,
            end_s=end_s,
        )
        worst = 0.0
        for _, fc, (rate, outside, before, *_) in runs.forecasts(constants):
            worst = max(
                worst,
                abs(fc.iterations_per_s / rate - 1),
                abs(fc.outside / outside - 1),
                abs(fc.before / before - 1),
            )
        return worst

    # start s, fixed wait s, wait s per (process per core) ** exponent, exponent, train()
    # dearer per process per core
    # (The growth of a result's wait with the crowd is mostly its CPU shared on the cores,
    # result_cpu_s, measured: the grid keeps a small part of it.)
    grid = grid or [
        (2.0 * s, 0.2 * r, k, 1.0, d)
        for s in range(1, 8)
        for r in range(3)
        for k in (0.0, 0.004, 0.016)
        for d in (0.0, 0.02, 0.05)
    ]
    if start_line is not None:  # measured: the grid keeps it
        start_measured = start_line[0] * statistics.median(alone)
        grid = sorted({(start_measured, *point[1:]) for point in grid})
    best = min(grid, key=error)
    steps = (
        0.0 if start_line is not None else 1.0,
        0.1,
        max(best[2], 0.002) / 2,
        0.0,
        max(best[4], 0.01) / 2,
    )
    for _ in range(3):  # halve the steps around the best point so far
        near = {
            tuple(max(0.0, b + k * step) for b, k, step in zip(best, ks, steps, strict=True))
            for ks in itertools.product((-1, 0, 1), repeat=5)
        }
        best = min(near, key=error)
        steps = tuple(step / 2 for step in steps)
    start, rest, crowd, exponent, dearer = best
    # The start is in these runs' CPU seconds; the model prices it relative to their
    # probe's fresh process alone (nan: runs from before the probe measured it).
    return {
        "start_s": start,
        "start_alone_s": statistics.median(alone) if alone else math.nan,
        "start_per_process": start_per_process,
        "end_s": end_s,
        "result_s": rest,
        "result_s_per_process": crowd,
        "crowd_exponent": exponent,
        "train_per_process": dearer,
        "driver_s": driver,
        "ray_cores_per_node": ray,
        "result_cpu_s": result_cpu_s,
        "clone_share": clone_share,
        "score_noise": score_noise,
        "learn_exponent": learn_exponent,
        "score_ceiling": score_ceiling,
        "clones_error": clones_error((score_noise, clone_share, learn_exponent, score_ceiling)),
        "largest_error": error(best),
        "start_measured": float(start_line is not None),
    }


def measured_start(
    rows: list[dict[str, Any]], ray_cores_per_node: float
) -> tuple[float, float] | None:
    """A trial process's start against its probe's fresh process alone, from the runs that
    measured their trial processes' starts (None: no run did): each run's median start over
    its probe's, as a line in the trial processes per core of its population, least squares
    over the runs: (the ratio with no crowd, the fraction more per process a core). Runs
    of one crowd only give their median ratio and no growth. A crowd is counted per core
    that Ray's own processes (``ray_cores_per_node`` on each node) leave the trials, as the
    forecast's simulated runs count it (``population.cores_left``)."""
    from workbench.plan.population import cores_left

    points = [
        (
            f["size"]
            * (1 + int(f.get("env_runners", 0)))
            / cores_left(f["forecast"]["cores"], int(f.get("nodes", 1)), ray_cores_per_node),
            ratio,
        )
        for f in rows
        if (starts := f.get("start_cpu_s"))
        and (alone := f.get("forecast", {}).get("start_alone_s"))
        and (ratio := statistics.median(starts) / alone) > 0
    ]
    if not points:
        return None
    crowds = [c for c, _ in points]
    ratios = [r for _, r in points]
    if len(set(crowds)) < 2:
        return statistics.median(ratios), 0.0
    slope, intercept = statistics.linear_regression(crowds, ratios)
    if intercept <= 0:
        return statistics.median(ratios), 0.0
    return intercept, max(0.0, slope / intercept)


def measured_end(rows: list[dict[str, Any]]) -> float | None:
    """The run's end after the population's last result, wall s: the median over the runs
    that recorded it of their shortest time from a trial's last result to fit()'s return,
    less half a second (Tune stamps a result in whole seconds, cut down). None: no run
    recorded it."""
    ends = [min(e) for f in rows if (e := f.get("last_result_to_end_s"))]
    return max(0.0, statistics.median(ends) - 0.5) if ends else None


def result_cpu(row: dict[str, Any], constants: Any) -> float | None:
    """A run's CPU seconds of a trial's own work for each result outside train() (None:
    not split). On shared cores that work and a train() stretch alike, so the slot time
    between results over the time in train() is that work's CPU over a train()'s; the two
    together are the trials' CPU less their starts, a result."""
    if "outside_between" not in row or row.get("trial_cpu_s") is None or not row["results"]:
        return None
    starts = row.get("start_cpu_s")
    if starts and len(starts) == row["size"]:  # each trial process's own, measured
        spent = sum(starts)
    else:
        spent = row["size"] * (row.get("forecast", {}).get("start_s") or constants.start_s)
    cpu = (row["trial_cpu_s"] - spent) / row["results"]
    ratio = row["outside_between"] / (1.0 - row["outside"])
    return cpu * ratio / (1.0 + ratio)


def _costs_of(row: dict[str, Any], base: Any) -> Any:
    """``base`` at this run's own probe: its draws' costs, its own first draws' and, where
    the run recorded the probe's figures (``forecast.probe``), their values and PBT's
    explore of them."""
    probe = row.get("forecast", {})
    costs = replace(
        base,
        iterations=tuple((float(c), float(w)) for c, w in probe["iteration_costs"]),
        drawn=tuple((float(c), float(w)) for c, w in own)
        if (own := probe.get("drawn_costs"))
        else None,
    )
    figures = probe.get("probe")
    if not figures or not figures.get("learner_costs"):
        return costs
    import tempfile

    import yaml

    from workbench.experiment.resolve import load_and_resolve
    from workbench.plan.population import cost_explore, drawn_points, first_draws
    from workbench.plan.throughput import Throughput
    from workbench.trial.config import build_config

    rate = Throughput(
        int(figures.get("runners", 0)),
        float(figures["per_core"]),
        None,
        None,
        True,
        per_core=float(figures["per_core"]),
        learner_costs=tuple(figures["learner_costs"]),
        learner_call_s_per_sample=float(figures.get("learner_call_s_per_sample", 0.0)),
        evaluation_s=float(figures.get("evaluation_s", 0.0)),
    )
    with tempfile.TemporaryDirectory() as folder:
        data = experiment_data(
            row["size"],
            row.get("iterations", 40),
            2.0,
            row["nodes"],
            Path(folder),
            int(row.get("env_runners", 0)),
            "iterations",
            row.get("costs", "searched"),
        )
        path = Path(folder) / "scale.yaml"
        path.write_text(yaml.safe_dump(data))
        resolved = load_and_resolve(path)
        config = build_config(resolved.experiment, resolved.defaults)
        drawn = first_draws(resolved, config)
    return replace(
        costs,
        drawn_points=drawn_points(drawn, config) if drawn and costs.drawn else None,
        explore=cost_explore(resolved.search_space, config, rate, resolved.experiment.scheduler),
    )


def _median_clones(runs: list[dict[str, Any]], kind: str = "clones") -> float:
    """The median count of clones (``back``: to a donor behind) of the runs that counted
    them (nan: none did)."""
    counts = [f["clones"][kind] for f in runs if kind in f.get("clones", {})]
    return float(statistics.median(counts)) if counts else math.nan


def calibrate(rows: list[dict[str, Any]], earlier: list[str], *, keep_clones: bool = False) -> None:
    """Prints the constants these runs and the earlier ones (files --json wrote) give: the
    runs stopped at their iterations, of either search space, each size and space priced
    from its own probe (the model's budget runs are checked, not fitted)."""

    from workbench.tune_ext.snapshot_pace import LAG_S

    def fitted(f: dict[str, Any]) -> bool:
        return (
            "outside_before" in f
            and f.get("stop", "iterations") == "iterations"
            and f.get("snapshot_lag_s") in (None, LAG_S)  # another lag's arm: another driver
        )

    runs = [f for f in rows if fitted(f)]
    for extra in earlier:
        runs += [f for f in json.loads(Path(extra).read_text()) if fitted(f)]
    if not runs:
        raise SystemExit("--calibrate: no timed runs to fit")
    constants = calibration(runs, keep_clones=keep_clones)
    print(f"\ncalibration on {len(runs)} runs, workbench/plan/population.py's Constants:")
    for name, value in constants.items():
        print(f"  {name} = {value:.4g}")
    print(compared(runs, constants))


def compared(rows: list[dict[str, Any]], constants: dict[str, float]) -> str:
    """A table of the forecast's errors on these runs (the median of each size's rounds):
    with the shipped constants, with the shipped and the measured ones (the driver, Ray's
    processes, a result's own CPU, the run's end) taken from these runs, and with all of
    ``constants``, the fit's."""
    from workbench.plan.population import MEASURED, Constants

    names = {f.name for f in dataclasses.fields(Constants)}
    measured = ("driver_s", "ray_cores_per_node", "result_cpu_s", "end_s")
    variants = {
        "shipped": MEASURED,
        "measured ones new": replace(MEASURED, **{k: constants[k] for k in measured}),
        "refit": Constants(**{k: v for k, v in constants.items() if k in names}),
    }
    runs = Groups.of(rows)
    each = {name: errors(runs, c) for name, c in variants.items()}
    head = " | ".join(variants)
    lines = [
        f"\n| runs | results/s | {head} | outside train() | {head} |",
        "|---|---:|" + "---:|" * len(variants) + "---:|" + "---:|" * len(variants),
    ]
    for key, (rate, outside, *_) in runs.measured.items():
        size, _, _, space = key
        rates = " | ".join(f"{100 * each[n][key][0]:+.0f}%" for n in variants)
        shares = " | ".join(f"{100 * each[n][key][1]:+.0f}%" for n in variants)
        label = f"{size}" + ("" if space == "searched" else f" ({space} costs)")
        lines.append(f"| {label} | {rate:.2f} | {rates} | {100 * outside:.1f}% | {shares} |")
    within = ", ".join(
        f"{name} {sum(abs(e) <= 0.25 for k in each[name] for e in each[name][k][:2])}"
        for name in variants
    )
    lines.append(f"\nwithin 25% of {2 * len(runs.measured)}: {within}")
    # What the clones' fit matches: the clones, those to a donor behind, the train() calls.
    clones = {name: {k: fc for k, fc, _ in runs.forecasts(c)} for name, c in variants.items()}
    lines += [
        f"\n| runs | clones (back), calls | {head} |",
        "|---|---:|" + "---:|" * len(variants),
    ]
    for key, (*_, results, count, back) in runs.measured.items():
        size, _, _, space = key
        label = f"{size}" + ("" if space == "searched" else f" ({space} costs)")
        each_fc = " | ".join(
            f"{fc.clones:.1f} ({fc.clones_back:.1f}), {fc.results:.0f}"
            for fc in (clones[name][key] for name in variants)
        )
        lines.append(f"| {label} | {count:.1f} ({back:.1f}), {results:.0f} | {each_fc} |")
    return "\n".join(lines)
