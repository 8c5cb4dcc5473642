"""Verdicts on where the time goes: a trial's or a population's time split (see
`workbench.trial.time_split`) read as sampling-, learner- or sync-bound, with the
arithmetic of what would help; `diagnose_population` reads a population's splits from
MLflow and gives each trial's verdict and the population's."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from workbench.analysis.histories import metric_histories
from workbench.analysis.leaderboards import Population, TrialRun
from workbench.analysis.populations import find_target
from workbench.trial.time_split import (
    PREFIX,
    REST_NOTE,
    TimeSplit,
    _finite,
    steady,
    total,
)

# Per iteration: (step, sampling, learner, sync, rest shares of the iteration's time).
Shares = list[tuple[float, float, float, float, float]]


def _pct(value: float) -> str:
    return f"{100 * value:.0f}%" if _finite(value) else "-"


def _s(value: float) -> str:
    if not _finite(value):
        return "-"
    if abs(value) < 5e-4:
        return "0 s"
    if value < 1:
        return f"{1000 * value:.3g} ms"
    return f"{value:.3g} s" if value < 10 else f"{value:.1f} s"


def _rate(value: float) -> str:
    if not _finite(value):
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _x(value: float) -> str:
    return f"{value:.2f}x" if _finite(value) else "-"


def _runners_now(split: TimeSplit) -> str:
    if split.env_runners == 0:
        return "now 1: the main process samples, resources.env_runners.count 0"
    return f"now {split.env_runners}"


@dataclass
class Diagnosis:
    """A verdict with its evidence and its recommendation, for a trial or a population."""

    label: str
    split: TimeSplit
    left_out: int = 0  # first iterations left out (warm-up)
    evidence: list[str] = field(default_factory=list)
    recommendation: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return self.split.verdict

    def lines(self) -> list[str]:
        s = self.split
        first = "the first" if self.left_out == 1 else f"the first {self.left_out}"
        used = f"{s.iterations} iterations" + (
            f", {first} left out (warm-up)" if self.left_out else ""
        )
        out = [f"{self.label}: {self.verdict} ({used})"]
        out += [f"  {line}" for line in self.evidence]
        out += [f"  -> {line}" for line in self.recommendation]
        return out

    def to_json(self) -> dict[str, Any]:
        s = self.split
        figures = {k: v for k, v in s.metrics().items() if k not in ("verdict", "timers_exact")}
        figures["iterations"] = s.iterations
        figures["exact_iterations"] = s.exact_iterations
        figures["env_steps_dropped"] = s.env_steps_dropped
        if s.lag_iterations:
            figures["policy_lag_updates_max"] = s.lag_updates_max
        figures["serial_fraction"] = s.serial_fraction
        return {
            "label": self.label,
            "verdict": self.verdict,
            "left_out_iterations": self.left_out,
            "figures": {k: v for k, v in figures.items() if not isinstance(v, float) or _finite(v)},
            "evidence": self.evidence,
            "recommendation": self.recommendation,
        }


def diagnose(label: str, split: TimeSplit, left_out: int = 0) -> Diagnosis:
    """The verdict of a (summed) split, the numbers behind it and what to do."""
    d = Diagnosis(label, split, left_out)
    s = split
    n = s.iterations
    if n == 0 or s.iteration_s <= 0:
        d.evidence.append("no iteration with timing figures yet")
        return d
    per = s.iteration_s / n
    d.evidence.append(
        f"iteration {_s(per)} on average = sampling {_s(s.sampling_s / n)} "
        f"({_pct(s.sampling_fraction)}) + learner update {_s(s.learner_s / n)} "
        f"({_pct(s.learner_fraction)}) + weight sync {_s(s.sync_s / n)} "
        f"({_pct(s.sync_fraction)}) + rest {_s(s.rest_s / n)} ({_pct(s.rest_fraction)})"
        + (" [main process; sampling and learning overlap]" if s.asynchronous else "")
    )
    samplers = (
        "1 sampler: the main process"
        if s.env_runners == 0
        else f"{s.env_runners} env runner{'s' if s.env_runners > 1 else ''}"
    )
    d.evidence.append(
        f"env steps: {_rate(s.env_steps_sampled / n)} sampled per iteration "
        f"({_rate(s.sampled_per_s)}/s of wall time); one runner samples "
        f"{_rate(s.sampled_per_s_per_runner)}/s while sampling ({samplers}); the learner "
        f"takes in {_rate(s.trained_per_s)}/s while it learns"
    )
    if s.asynchronous:
        d.evidence.append(
            f"learner busy {_pct(s.learner_busy_fraction)} of the time (the larger of the main "
            "process's time blocked handing it batches and its thread's update time against its "
            "wait for data, RLlib EMAs with coeff 0.01)"
            + (f"; {_rate(s.env_steps_dropped)} env steps dropped" if s.env_steps_dropped else "")
        )
    if s.lag_iterations and (s.asynchronous or s.policy_lag_updates > 1):
        d.evidence.append(
            f"policy lag: {s.policy_lag_updates:.2f} gradient updates on average (max "
            f"{s.lag_updates_max:.0f}) between the weights that sampled a batch and the "
            "learner's when it trained on it (diff_num_grad_updates_vs_sampler_policy)"
        )
    if s.rest_fraction >= REST_NOTE:
        d.evidence.append(
            f"{_pct(s.rest_fraction)} of the iteration is outside the three timers "
            "(evaluation, metrics, restoring runners, a CPU shared with other trials)"
        )
    _recommend(d)
    return d


def _recommend(d: Diagnosis) -> None:
    s = d.split
    needed = s.runners_needed
    arithmetic = (
        f"runners needed to keep the learner busy = {_rate(s.trained_per_s)} / "
        f"{_rate(s.sampled_per_s_per_runner)} = {needed:.2f}"
        if _finite(needed)
        else "runners needed: unknown (no learner or sampling rate yet)"
    )
    verdict = s.verdict
    rec = d.recommendation
    if s.asynchronous:
        if verdict == "sampling-bound":
            target = max(1, math.ceil(needed)) if _finite(needed) else None
            rec.append(
                f"add env runners: {arithmetic}"
                + (f": about {target} ({_runners_now(s)})" if target else "")
            )
        elif verdict == "learner-bound":
            rec.append(
                f"the learner is the limit: {arithmetic} ({_runners_now(s)}); more runners "
                "only add policy lag and dropped samples: a faster learner "
                "(resources.gpus_per_learner, resources.num_learners) or less work per "
                "batch (num_epochs, minibatch_size)"
            )
        elif verdict == "sync-bound":
            rec.append(
                f"weight broadcasts take {_pct(s.sync_fraction)} of the main process: "
                "broadcast less often (broadcast_interval) or to fewer runners"
            )
        elif verdict == "balanced":
            rec.append(f"runners and learner are matched: {arithmetic} ({_runners_now(s)})")
        return
    p = s.sampling_fraction
    serial = s.serial_fraction
    amdahl = (
        f"Amdahl (synchronous: sampling {_pct(p)} of an iteration can spread over runners, "
        f"the serial {_pct(serial)} cannot): at most 1 / {serial:.2f} = "
        f"{_x(s.amdahl_max_speedup)} faster with any number of runners"
    )
    if verdict == "sampling-bound":
        target = max(s.samplers + 1, math.ceil(needed)) if _finite(needed) else s.samplers * 2
        rec.append(f"add env runners: {arithmetic}: about {target} ({_runners_now(s)})")
        rec.append(
            f"with {target} runners an iteration would take {1 / s.speedup_with(target):.2f} "
            f"of today's ({_x(s.speedup_with(target))} faster): {serial:.2f} + {p:.2f} x "
            f"{s.samplers}/{target}; {amdahl}"
        )
        rec.append(
            "each runner needs its CPU (resources.env_runners.cpus_each): check the "
            "cluster with `workbench plan`"
        )
    elif verdict == "learner-bound":
        rec.append(
            f"the learner is the limit: {arithmetic} ({_runners_now(s)}); {amdahl}. Make the "
            "update cheaper or faster: fewer num_epochs, a larger minibatch_size, smaller "
            "networks (model.fcnet_hiddens; `defaults: small_env` for small observations), a "
            "GPU learner (resources.gpus_per_learner) or more learners (resources.num_learners)"
        )
    elif verdict == "sync-bound":
        rec.append(
            f"weight sync takes {_pct(s.sync_fraction)} of an iteration: learn more per sync "
            "(a larger train_batch_size_per_learner) or sync fewer runners; "
            f"{arithmetic}"
        )
    elif verdict == "balanced":
        rec.append(
            f"sampling ({_pct(p)}) and learning ({_pct(s.learner_fraction)}) are close: "
            f"{arithmetic} ({_runners_now(s)}); {amdahl}"
        )


@dataclass
class PopulationDiagnosis:
    """`workbench diagnose`: each trial's verdict, the population's (when it has several
    trials) and the per-iteration shares the time-split PNG draws."""

    store: str  # the MLflow store read
    population: Population
    trials: list[TrialRun]
    reports: list[Diagnosis]  # one per trial, in the order of `trials`
    population_report: Diagnosis | None  # None: a single trial
    shares: dict[str, Shares]  # trial name -> shares of the iterations with a time

    @property
    def has_figures(self) -> bool:
        """Whether any iteration logged its time split (workbench/* metrics)."""
        return any(r.split.iterations for r in self.reports)

    @property
    def verdicts(self) -> dict[str, str]:
        """Trial name -> its verdict (the PNG's subtitles)."""
        return {t.name: r.verdict for t, r in zip(self.trials, self.reports, strict=True)}

    def to_json(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "population": self.population.name,
            "run_id": self.population.run_id,
            "trials": [r.to_json() for r in self.reports],
            "population_diagnosis": self.population_report.to_json()
            if self.population_report
            else None,
        }


def diagnose_population(
    client: Any, store: str, population: Population, trials: list[TrialRun]
) -> PopulationDiagnosis:
    """Each trial's verdict from its steady iterations (the warm-up left out) and, with
    several trials, the population's from all of them summed, with how many trials are
    bound by what."""
    prefix = PREFIX + "/"
    reports = []
    shares: dict[str, Shares] = {}
    steady_splits = []
    for trial in trials:
        history = metric_histories(client, trial, prefix)
        splits = [TimeSplit.from_metrics(m) for m in history.values()]
        used, left_out = steady(splits)
        steady_splits.extend(used)
        reports.append(diagnose(f"Trial {trial.name}", total(used), left_out))
        shares[trial.name] = [
            (
                float(step),
                s.sampling_fraction,
                s.learner_fraction,
                s.sync_fraction,
                s.rest_fraction,
            )
            for step, s in zip(history, splits, strict=True)
            if s.iteration_s > 0
        ]
    together = None
    if len(trials) > 1:
        together = diagnose(
            f"Population {population.name} ({len(trials)} trials together)",
            total(steady_splits),
        )
        counts: dict[str, int] = {}
        for report in reports:
            counts[report.verdict] = counts.get(report.verdict, 0) + 1
        together.evidence.insert(
            0, "trials: " + ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
        )
    return PopulationDiagnosis(store, population, list(trials), reports, together, shares)


def diagnose_target(
    target: str | None, *, store: str | None = None, population_ref: str | None = None
) -> PopulationDiagnosis:
    """`diagnose_population` of what a TARGET means (see `find_target`)."""
    found = find_target(target, store=store, population_ref=population_ref)
    return diagnose_population(found.client, found.uri, found.population, found.trials)
