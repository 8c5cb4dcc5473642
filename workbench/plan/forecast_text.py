"""What `workbench plan` prints of a population's forecast (workbench.plan.population): one
``train()``'s cost, a trial process's start, the pace and the share outside ``train()``,
and the same population under a budget for the whole population."""

from __future__ import annotations

from workbench.plan.population import Forecast, TrialCosts


def _drawn_note(costs: TrialCosts, trials: int) -> str:
    own, in_order = costs.trial_draws(trials)
    if not in_order:
        return ""
    mean = sum(c for c, _ in own) / len(own)
    return f"; ~{mean:.3g} s for this population's own first draws, which the forecast uses"


def forecast_lines(result: Forecast) -> list[str]:
    """What `workbench plan` prints."""
    c = result.costs
    per = "" if result.iterations_given else f" (no stop in iterations: {result.iterations} shown)"
    cheap, dear = c.iterations[len(c.iterations) // 10], c.iterations[-len(c.iterations) // 10]
    nominal = result.trials * result.iterations
    if result.budget is not None and result.budget <= nominal:
        # The budget counts each result once, clone or not: the exploits skip none of it.
        shape = f"{result.trials} trials sharing {result.budget} iterations (the env-step budget)"
        skipped = ""
    else:
        shape = f"{result.trials} trials x {result.iterations} iterations{per}"
        skipped = ""
        if result.results < 0.995 * nominal:
            skipped = (
                f" (PBT's exploits skip ~{100 * (1 - result.results / nominal):.0f}% of the "
                f"{nominal} iterations: ~{result.results:.0f} train() calls)"
            )
        elif result.results > 1.005 * nominal:
            skipped = (
                f" (PBT's exploits repeat ~{100 * (result.results / nominal - 1):.0f}% more "
                f"than the {nominal} iterations: ~{result.results:.0f} train() calls)"
            )
    return [
        f"Population forecast ({c.source} for train(); the rest measured here, docs/resources.md):",
        f"  one train(): ~{c.iteration_cpu_s:.3g} CPU s on average over the searched "
        f"hyperparameters ({cheap[0]:.2g}-{dear[0]:.2g} s from the 10th to the 90th percentile)"
        + _drawn_note(c, result.trials),
        _crowd_line(result),
        f"  a trial process's start: ~{result.start_s:.3g} CPU s among the "
        f"{result.starting} trial process{'' if result.starting == 1 else 'es'} "
        f"starting together, "
        + (
            f"from a fresh process's {c.start_measured_s:.3g} alone (measured by --probe)"
            if c.start_measured_s is not None
            else "as measured on this project's machine (--probe measures it here)"
        ),
        f"  {shape}, {result.at_once} at "
        f"once on {result.cores:g} cores: ~{result.iterations_per_s:.3g} iterations/s, "
        f"~{_minutes(result.wall_s)}{skipped}; ~{100 * result.outside:.0f}% of the trials' "
        f"time outside train(): ~{100 * result.before:.0f}% before their first, "
        f"~{100 * result.after:.0f}% after their last (waiting for the slowest); the pace is "
        f"set by {result.bound}",
        *_pooled_lines(result),
    ]


def _crowd_line(result: Forecast) -> str:
    """How much dearer the population's crowd makes a train(), and where that comes from."""
    c = result.costs
    per_core = result.starting / result.cores if result.cores else 0.0
    dearer = 1.0 + c.train_per_process * min(per_core, c.crowd_saturation)
    if c.crowd_measured:
        how = (
            f"measured by --probe: {c.crowd_ratio:.3g} times among {c.crowd_saturation:.3g} "
            "processes a core, and no dearer among more"
        )
    else:
        how = "the documented line, measured on this project's machine (--probe measures it here)"
    text = (
        f"  among the population's {per_core:.3g} trial processes a core a train() costs "
        f"~{dearer:.3g} times its cost alone ({how})"
    )
    if c.evaluation_s > 0:
        text += f"; its short evaluations ~{c.evaluation_s:.2g} CPU s a train() alone"
    return text


def _pooled_lines(result: Forecast) -> list[str]:
    """The same population under a budget for the whole population, beside the stop in
    iterations per trial (docs/resources.md: faster where the slots the first finishers
    leave would stand idle, not where they hand their cores to the trials still going)."""
    pooled = result.pooled
    if pooled is None or result.iterations_per_s <= 0:
        return []
    change = pooled.iterations_per_s / result.iterations_per_s - 1
    pace = (
        "about the same iterations a second"
        if abs(change) < 0.05
        else f"~{100 * abs(change):.0f}% {'more' if change > 0 else 'fewer'} iterations a second"
    )
    return [
        f"  as a budget for the whole population instead (stop: population_env_steps: "
        f"{result.pooled_env_steps}, the same env steps): ~{_minutes(pooled.wall_s)}, {pace}, "
        f"~{100 * pooled.outside:.0f}% of the trials' time outside train()"
    ]


def _minutes(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
