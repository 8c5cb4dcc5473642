"""What a person wants to know when a run ends: the trials, the best one, its schedule,
its evaluation and where to look next."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.names import (
    EVAL_EPISODES_METRIC,
    EVAL_RETURN_METRIC,
    EVAL_STD_METRIC,
    SCORE_EPISODES_METRIC,
    SCORE_METRIC,
)
from workbench.run.progress import (
    RETURN_KEYS,
    ProgressTable,
    StopGoal,
    TrialRecord,
    clock,
    metric_label,
    number,
)
from workbench.trial.candidates import PopulationResult


@dataclass
class RunSummary:
    name: str
    results_dir: Path
    trials: list[TrialRecord] = field(default_factory=list)
    best: TrialRecord | None = None
    errors: int = 0
    tracking_uri: str | None = None
    mlflow_experiment: str | None = None
    # Stopped before its stop rules (Ctrl-C, SIGTERM): `workbench resume` continues it.
    interrupted: bool = False
    # The best trial's last checkpoint rolled out (evaluation.at_end), or why it was not.
    evaluation: Any = None  # workbench.evaluate.Evaluation
    evaluation_note: str | None = None
    # The population's result (workbench.run.population_result), when one was chosen.
    result: PopulationResult | None = None
    # The trial whose confirmed evaluation met the return target (its name).
    reached_by: str | None = None
    # What the stop on the return target saw: the trial's score and its confirming
    # evaluation (workbench.run.stopping.RulesStopper.reached); empty when none was met.
    confirmation: dict[str, float] = field(default_factory=dict)
    # The driver's time from Tune's start to its end, and why the run stopped.
    wall_time_s: float | None = None
    # A resumed population's time under its wall-time budget, earlier sessions included.
    wall_time_all_s: float | None = None
    stop_reason: str | None = None

    @property
    def exit_code(self) -> int:
        """0 done, 1 a trial failed (its error is in its trial folder and on its MLflow
        run), 130 interrupted (as a shell reports Ctrl-C)."""
        if self.interrupted:
            return 130
        return 1 if self.errors else 0

    def lines(self) -> list[str]:
        out = [f"Experiment {self.name}: {len(self.trials)} trials, {self.errors} errored"]
        if self.wall_time_s is not None:
            why = f"; stopped: {self.stop_reason}" if self.stop_reason else ""
            total = self.wall_time_all_s
            shown = f"; {clock(total)} with earlier sessions" if total is not None else ""
            out.append(f"Ran {clock(self.wall_time_s)} (wall clock{shown}){why}")
        if self.best is not None:
            role = "Member holding the result" if self.result is not None else "Best trial"
            out.append(
                f"{role} {self.best.name}: {metric_label(self.best.return_metric)} "
                f"{self.best.best_return:.1f} "
                f"(last {self.best.last_return:.1f}) after {self.best.iteration} iterations, "
                f"{self.best.env_steps} env steps"
            )
            if self.best.schedule:
                out.append("Its hyperparameters over time (first iteration trained with them):")
                for iteration, values in self.best.schedule:
                    shown = ", ".join(f"{k}={_short(v)}" for k, v in values.items())
                    out.append(f"  {iteration:>4}: {shown}")
        else:
            out.append("No trial reported a return (no episode finished).")
        if self.result is not None and self.evaluation is not None:
            r = self.result
            reported = {t.name: t.iteration for t in self.trials}
            which = "its final policy" if r.final else f"its policy of iteration {r.iteration}"
            if not r.final and r.trial_name in reported and r.iteration > reported[r.trial_name]:
                # The trial saved the candidate inside train(); the stop came before Tune
                # took that iteration's result, so the table ends an iteration earlier.
                which += " (trained as the population stopped, after its last reported result)"
            logged = "; logged to its MLflow run as eval/*" if self.evaluation.run_id else ""
            out.append(
                f"The population's result: {r.trial_name}, {which}: "
                f"{self.evaluation.summary()}{logged}"
            )
            out.append(
                f"  chosen from {r.candidates} candidates (the best of {len(r.confirmed)} "
                f"confirmed); evaluations took {r.eval_env_steps:,} env steps, "
                f"{r.eval_time_s:.1f} s; `workbench eval {self.name}` rolls it out again"
            )
        if self.evaluation_note:
            out.append(self.evaluation_note)
        if self.confirmation:
            out.append(confirmation_line(self.confirmation, self.reached_by))
        out.append(f"Results: {self.results_dir}")
        if self.interrupted:
            unfinished = sum(t.status not in ("TERMINATED", "ERROR") for t in self.trials)
            what = (
                f"{unfinished} trials unfinished"
                if unfinished
                else "trials of the search not yet started"
            )
            out.append(
                f"Interrupted with {what}; the state is saved: continue "
                f"with `workbench resume {self.results_dir}`"
            )
        if self.tracking_uri:
            store = _store_argument(self.tracking_uri)
            out.append(
                f"MLflow: {self.tracking_uri} (experiment {self.mlflow_experiment}); inspect with "
                f"`workbench runs {self.mlflow_experiment}{store}` or `workbench ui{store}`"
            )
        return out


def _store_argument(uri: str) -> str:
    """The --store option the inspection commands need for this URI ('' for the default)."""
    if uri == os.environ.get("MLFLOW_TRACKING_URI"):
        return ""
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        try:
            shown = path.relative_to(Path.cwd())
        except ValueError:
            shown = path
        if str(shown) == "results/mlflow.db":
            return ""
        return f" --store {shown}"
    return f" --store {uri}"


def confirmation_line(reached: dict[str, float], trial: str | None) -> str:
    """The stop on the return target as one line: the score that asked for it and the
    evaluation that confirmed it, as mean ± std over n episodes."""
    who = trial or "the trial"
    iteration = reached.get("training_iteration")
    at = f" at iteration {int(iteration)}" if iteration is not None else ""
    score = reached.get(SCORE_METRIC)
    line = f"Return target reached by {who}{at}"
    if score is not None:
        line += f": score {score:.1f} over {int(reached.get(SCORE_EPISODES_METRIC, 0))} episodes"
    mean = reached.get(EVAL_RETURN_METRIC)
    if mean is not None:
        std = reached.get(EVAL_STD_METRIC, math.nan)
        n = int(reached.get(EVAL_EPISODES_METRIC, 0))
        line += f", confirmed by its evaluation: {mean:.1f} ± {std:.1f} over {n} episodes"
    return line


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def stop_reason(
    trials: list[TrialRecord],
    goal: StopGoal,
    *,
    interrupted: bool,
    budget_spent: bool,
    reached_by: str | None,
    early_stopper: str | None = None,
    env_steps_spent: int | None = None,
) -> str:
    """Why the run ended, in the words of its stop rules: the return target (whose
    trial), the wall-time or env-step budget (``env_steps_spent``: what the trials
    sampled, when the budget ended the run), the trials' own rules, failures, or an
    interruption."""
    if interrupted:
        return "interrupted (Ctrl-C or SIGTERM) before its stop rules"
    if reached_by is not None:
        target = next((v for k, v in goal.rules.items() if k in RETURN_KEYS), None)
        shown = f" {number(target)}" if target is not None else ""
        return f"{reached_by} reached the return target{shown}, which ends the whole population"
    if env_steps_spent is not None:
        return (
            f"the env-step budget ({goal.env_step_budget or 0:,}) was spent: the trials "
            f"sampled {env_steps_spent:,} env steps"
        )
    if budget_spent and goal.wall_time_s is not None:
        return f"the wall-time budget ({clock(goal.wall_time_s)}) ran out"
    failed = sum(t.status == "ERROR" for t in trials)
    rules = StopGoal(goal.rules).describe()
    if failed and failed == len(trials):
        return "every trial failed"
    early = f", or {early_stopper} stopped it early" if early_stopper else ""
    if failed:
        others = f"the others reached a stop rule ({rules}){early}"
        return f"{failed} of {len(trials)} trials failed; {others}"
    return f"every trial reached a stop rule ({rules}){early}"


def summarize(name: str, results_dir: Path, table: ProgressTable, errors: int) -> RunSummary:
    trials = list(table.records.values())
    scored = [t for t in trials if not math.isnan(t.best_return)]
    best = max(scored, key=lambda t: t.best_return) if scored else None
    return RunSummary(
        name=name,
        results_dir=results_dir,
        trials=trials,
        best=best,
        errors=errors,
    )
