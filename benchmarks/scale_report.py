"""The tables ``benchmarks/population_scale.py`` prints: each run's figures, per size the
median over its rounds, and the plan's forecast beside the measurement."""

from __future__ import annotations

import statistics
from typing import Any


def population_label(f: dict[str, Any]) -> str:
    """A run's population, its stop where it is the population's budget, and its costs
    where every member's are equal (``--costs equal``)."""
    notes = [
        *(["budget"] if f.get("stop") == "budget" else []),
        *(["equal costs"] if f.get("costs") == "equal" else []),
        *([f"snapshot lag {f['snapshot_lag_s']:g} s"] if "snapshot_lag_s" in f else []),
    ]
    return f"{f['size']}" + (f" ({', '.join(notes)})" if notes else "")


def variant(f: dict[str, Any]) -> tuple[int, str, str, float]:
    """The size, stop, costs and snapshot lag of a run: the rounds of one variant share
    these (a run from before the lag was an arm snapshotted after every checkpoint: 0)."""
    return (
        f["size"],
        f.get("stop", "iterations"),
        f.get("costs", "searched"),
        float(f.get("snapshot_lag_s", 0.0)),
    )


def lag_table(rows: list[dict[str, Any]]) -> None:
    """With ``--snapshot-lags``: each lag beside the anchor (0: a snapshot after every trial
    checkpoint) of the same size, stop and costs, and the paired difference of each round
    (the arms of a round ran one after the other), median [min-max] over the rounds."""
    lags = sorted({float(f.get("snapshot_lag_s", 0.0)) for f in rows})
    if len(lags) < 2 or lags[0] != 0.0:
        return
    figures = {
        "outside train()": lambda f: 100 * f["outside"],
        "between results": lambda f: 100 * f.get("outside_between", float("nan")),
        "driver CPU ms a result": lambda f: 1000 * f["driver_cpu_s"] / max(f["results"], 1),
        "fit s": lambda f: f["wall_s"],
    }
    print(
        "\nSnapshot lag against a snapshot after every checkpoint (the anchor, lag 0): median "
        "[min-max] over the rounds, and the paired difference lag - anchor of each round"
    )
    print("| trials | lag s | rounds | " + " | ".join(f"{k} | diff" for k in figures) + " |")
    print("|---:|---:|---:|" + "---:|---:|" * len(figures))
    for key in sorted({variant(f)[:3] for f in rows}):
        arms = {
            lag: {f.get("round", 1): f for f in rows if variant(f) == (*key, lag)} for lag in lags
        }
        anchor = arms[0.0]
        for lag in lags:
            runs = arms[lag]
            if not runs:
                continue
            cells = []
            for figure in figures.values():
                values = [figure(f) for f in runs.values()]
                paired = [figure(f) - figure(anchor[r]) for r, f in runs.items() if r in anchor]
                cells.append(_spread(values, digits=1))
                cells.append(_spread(paired, digits=1) if lag and paired else "")
            first = runs[min(runs)]
            label = population_label({k: v for k, v in first.items() if k != "snapshot_lag_s"})
            print(f"| {label} | {lag:g} | {len(runs)} | " + " | ".join(cells) + " |")


def report(every: list[dict[str, Any]]) -> None:
    rows = [f for f in every if "wall_s" in f]  # the timed sizes (not the driver drill's)
    if rows:
        print(
            "\n| trials | round | fit s | env steps/s | outside train() | before first | between "
            "| after last | trial RSS MB median [max] | RSS sum GB | trial processes per node |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for f in rows:
            split = [
                100 * f.get(f"outside_{p}", float("nan")) for p in ("before", "between", "after")
            ]
            nodes = ", ".join(f"{k} {v}" for k, v in f["per_node"].items())
            print(
                f"| {population_label(f)} | {f.get('round', 1)} "
                f"| {f['wall_s']:.0f} | {f['rate']:.0f} "
                f"| {100 * f['outside']:.1f}% "
                f"| {split[0]:.1f}% | {split[1]:.1f}% | {split[2]:.1f}% "
                f"| {f['rss_median_mb']:.0f} [{f['rss_max_mb']:.0f}] "
                f"| {f['rss_sum_mb'] / 1024:.1f} | {nodes} |"
            )
        for f in rows:
            print(
                f"population {population_label(f)}, round {f.get('round', 1)}: "
                f"the driver's process used "
                f"{f['driver_cpu_s']:.0f} CPU s "
                f"({100 * f['driver_cpu_s'] / f['wall_s']:.0f}% of a core over fit()), "
                f"{1000 * f['driver_cpu_s'] / max(f['results'], 1):.0f} ms a result "
                f"({f['results']} results)"
                + (
                    f"; the benchmark's sampling threads beside it {f['watching_cpu_s']:.1f} CPU s"
                    if "watching_cpu_s" in f
                    else ""
                )
            )
            if "trial_cpu_s" in f:
                cores = f.get("forecast", {}).get("cores")
                used = (
                    f["driver_cpu_s"]
                    + f.get("watching_cpu_s", 0.0)
                    + f["trial_cpu_s"]
                    + f["ray_cpu_s"]
                )
                print(
                    f"  the trial processes {f['trial_cpu_s']:.0f} CPU s "
                    f"({f['trial_cpu_s'] / max(f['results'], 1):.2f} a result), Ray's other "
                    f"processes {f['ray_cpu_s']:.0f} CPU s "
                    f"({100 * f['ray_cpu_s'] / f['wall_s']:.0f}% of a core)"
                    + (
                        f"; with the driver {100 * used / (cores * f['wall_s']):.0f}% of the "
                        f"{cores:g} cores over fit()"
                        if cores
                        else ""
                    )
                )
            starts = f.get("start_cpu_s")
            if starts:
                fc = f.get("forecast", {})
                print(
                    f"  a trial process's CPU when its first train() began: "
                    f"{statistics.median(starts):.2f} s median [{starts[0]:.2f}-{starts[-1]:.2f}]"
                    f" over {len(starts)}"
                    + (
                        f"; the model's start among them "
                        f"{fc.get('start_crowded_s', fc['start_s']):.2f}, the "
                        f"probe's fresh process alone {fc['start_alone_s']:.2f}"
                        if fc.get("start_s") is not None and fc.get("start_alone_s") is not None
                        else ""
                    )
                )
            ends = f.get("last_result_to_end_s")
            if ends:
                slot = len(ends) * f["wall_s"]
                end = ends[0]
                print(
                    f"  after the last results: fit() ended {end:.0f} s after the population's "
                    f"last result ({100 * len(ends) * end / slot:.1f}% of the slot time); the "
                    f"trials that finished first waited {statistics.median(ends) - end:.0f} s "
                    f"(median) for the slowest ({100 * (sum(ends) - len(ends) * end) / slot:.1f}%)"
                )
            held = f.get("checkpoint_folders")
            if held and held["peaks"]:
                peaks = held["peaks"]
                print(
                    f"  checkpoint folders a trial held at once (sampled every "
                    f"{held.get('period_s', 2.0):g} s): "
                    f"{statistics.median(peaks):g} median, {peaks[-1]} at most, "
                    f"{sum(p > held['keep'] for p in peaks)} of {len(peaks)} trials over "
                    f"checkpoint.keep ({held['keep']})"
                )
            clones = f.get("clones")
            if clones:
                predicted = f.get("forecast", {}).get("results")
                print(
                    f"  clones: {clones['clones']} ({clones['ahead']} to a donor ahead, "
                    f"{clones['back']} back, {clones['same']} to the same iteration), "
                    f"{clones['net_skipped']:+d} iterations skipped net"
                    + (
                        f"; the model cloned {f['forecast'].get('clones', float('nan')):.1f} "
                        f"times ({f['forecast'].get('clones_back', 0.0):.1f} back) and skipped "
                        f"{f['size'] * f['iterations'] - predicted:+.0f}"
                        if predicted is not None and f.get("stop", "iterations") == "iterations"
                        else ""
                    )
                )
            machine = f.get("machine")
            if machine:
                print(
                    f"  the machine: {machine.get('pgmajfault', 0)} major page faults, "
                    f"{machine.get('pgscan_kswapd', 0) + machine.get('pgscan_direct', 0)} "
                    f"pages scanned to reclaim ({machine.get('pgscan_direct', 0)} by "
                    f"allocating processes), {machine.get('ctxt', 0) / f['wall_s']:.0f} "
                    f"context switches a second, MemAvailable down to "
                    f"{f['min_available_mb'] / 1024:.1f} GB"
                    + (
                        f", some task waiting on I/O {machine['io_some_us'] / 1e6:.0f} s "
                        f"({100 * machine['io_some_us'] / 1e6 / f['wall_s']:.0f}% of fit())"
                        if "io_some_us" in machine
                        else ""
                    )
                )
            waits = f.get("long_waits")
            if waits:
                # Where the population stalled: the 10 s waits between results, by the
                # tenth of fit() they ended in.
                tenths = [0.0] * 10
                for ended, wait, *_ in waits:
                    tenths[min(9, max(0, int(10 * ended / f["wall_s"])))] += wait
                waited = sum(tenths)
                print(
                    f"  {len(waits)} waits of 10 s or more between a trial's results, "
                    f"{waited:.0f} s in all ("
                    f"{100 * waited / (f['size'] * f['wall_s']):.1f}% "
                    "of the slot time); by tenth of fit(): " + ", ".join(f"{t:.0f}" for t in tenths)
                )
        print(
            "\nPlacement: bundles per node as `workbench plan` places the trials at once, and as "
            "Ray placed them (its placement group table, at the moment the most groups existed; "
            "Ray breaks ties between equally free nodes in its own order, so the counts a node "
            "are compared, not the names)"
        )
        for f in rows:
            place = f["placement"]
            planned = ", ".join(f"{k} {v}" for k, v in sorted(place["planned"].items()))
            actual = ", ".join(f"{k} {v}" for k, v in place["ray"].items())
            print(
                f"population {population_label(f)}, round {f.get('round', 1)}: plan {planned} "
                f"({place['planned_across_nodes']} trials "
                f"across nodes); Ray {actual} ({place['ray_groups']} groups, "
                f"{place['ray_across_nodes']} across nodes); "
                f"{'the same' if place.get('same_counts') else 'not the same'} counts a node"
            )
    lag_table(rows)
    forecasts = [f for f in rows if "forecast" in f]
    if forecasts:
        forecast_table(forecasts)
    for f in every:
        if "driver_drill" in f:
            d = f["driver_drill"]
            print(
                f"population {f['size']}: the driver SIGKILLed {d['killed_s']:.0f} s into the "
                f"run ({d['results_at_kill']} results, {d['training_at_kill']} trials "
                f"training); `workbench resume --address` took {d['resume_s']:.0f} s; "
                f"{d['restored_from_checkpoint']} of them went on from a checkpoint; "
                f"{d['finished']} of {f['size']} reached their stop rule; MLflow "
                f"{d['mlflow_runs']} trial runs, {d['mlflow_finished']} FINISHED, gaps in "
                f"{d['mlflow_gaps'] or 'none'}; lineage {d['lineage_records']} records, "
                f"problems: {d['lineage_problems'] or 'none'}"
            )
    for f in rows:
        if "lost" in f:
            lost = f["lost"]
            print(
                f"population {f['size']}: {lost['node']} lost {lost['seconds_into_fit']:.0f} s "
                f"into fit(); {lost['failed_and_restored']} trials failed and went on from a "
                f"checkpoint; {lost['finished']} of {f['size']} reached their stop rule; MLflow "
                f"{lost['mlflow_runs']} trial runs, {lost['mlflow_finished']} FINISHED, gaps in "
                f"{lost['mlflow_gaps'] or 'none'}; lineage {lost['lineage_records']} records, "
                f"problems: {lost['lineage_problems'] or 'none'}"
            )


def _spread(values: list[float], scale: float = 1.0, digits: int = 2, unit: str = "") -> str:
    """median [min-max] of values (times scale)."""
    low, mid, high = (scale * v for v in (min(values), statistics.median(values), max(values)))
    return f"{mid:.{digits}f}{unit} [{low:.{digits}f}-{high:.{digits}f}]"


def forecast_table(forecasts: list[dict[str, Any]]) -> None:
    """``workbench plan``'s forecast of each size beside the measured median [min-max] over
    its rounds; the error is against the median, and within its runs' range where the
    forecast lies between the slowest and the fastest round."""
    print(
        "\n`workbench plan`'s forecast beside the measurement, median [min-max] over the rounds "
        "(results per second: all the trials' train() results over fit(); error: forecast / "
        "measured median - 1)"
    )
    print(
        "| trials | rounds | train() calls forecast | measured | results/s forecast | measured "
        "| error | outside train() forecast | measured | error | before the first result "
        "forecast | measured | error | after the last result forecast | measured | error "
        "| forecast bound |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    within = total = 0
    for key in sorted({variant(f) for f in forecasts}):
        runs = [f for f in forecasts if variant(f) == key]
        fc = runs[0]["forecast"]
        rates = [f["results"] / f["wall_s"] for f in runs]
        outside = [f["outside"] for f in runs]
        before = [f.get("outside_before", float("nan")) for f in runs]
        after = [f.get("outside_after", float("nan")) for f in runs]
        errors = (
            fc["results_per_s"] / statistics.median(rates) - 1,
            fc["outside"] / statistics.median(outside) - 1,
        )
        within += sum(abs(e) <= 0.25 for e in errors)
        total += len(errors)
        print(
            f"| {population_label(runs[0])} | {len(runs)} | {fc.get('results', float('nan')):.0f} "
            f"| {_spread([f['results'] for f in runs], digits=0)} "
            f"| {fc['results_per_s']:.2f} | {_spread(rates)} | {100 * errors[0]:+.0f}% "
            f"| {100 * fc['outside']:.1f}% | {_spread(outside, 100, 1, '%')} "
            f"| {100 * errors[1]:+.0f}% "
            f"| {100 * fc.get('before', float('nan')):.1f}% | {_spread(before, 100, 1, '%')} "
            f"| {100 * (fc.get('before', float('nan')) / statistics.median(before) - 1):+.0f}% "
            f"| {100 * fc.get('after', float('nan')):.1f}% | {_spread(after, 100, 1, '%')} "
            f"| {100 * (fc.get('after', float('nan')) / statistics.median(after) - 1):+.0f}% "
            f"| {fc['bound']} |"
        )
    first = forecasts[0]["forecast"]
    print(
        f"within 25% of the measured median: {within} of {total} (results a second and the "
        f"share outside train())\nforecast inputs: one train() ~{first['iteration_cpu_s']:.3g} "
        f"CPU s (the probe, averaged over the search space; the short evaluations' "
        f"{first.get('evaluation_cpu_s', 0.0):.2g} included), {first['cores']:g} cores "
        f"shared by the nodes"
        + (
            f"; a train() among {first['crowd'][0]:.3g} processes a core {first['crowd'][1]:.3g} "
            "times its cost alone (the probe), no dearer among more"
            if first.get("crowd")
            else "; a crowded train() priced by the documented line"
        )
    )
