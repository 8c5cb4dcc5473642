"""A budget that ended a population, and a resume that extends it.

When stop.wall_time_s or stop.population_env_steps runs out, Tune ends every trial still
running: they are TERMINATED like trials that met their own stop rules, and a plain
resume has nothing to do. The run writes which trials the budget ended (BUDGET_FILE);
`workbench resume NAME --set stop.wall_time_s=...` with a larger budget opens exactly
those again, from their newest checkpoints, and the stopper counts on from what the
earlier sessions spent. Light: the CLI reads it before Ray starts."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workbench.errors import ExperimentError, Problem
from workbench.experiment.schema import StopSection
from workbench.files import write_atomic
from workbench.names import BUDGET_FILE, RESOLVED_FILE

# The stop rule of each budget, by the stopper's name for it (RulesStopper.ran_out).
BUDGET_FIELDS = {"wall_time": "wall_time_s", "env_steps": "population_env_steps"}


@dataclass(frozen=True)
class BudgetRanOut:
    """What a run that a budget ended leaves for a resume."""

    budget: str  # "wall_time" or "env_steps"
    limit: float  # the budget's value then
    spent: float  # seconds or env steps, every session's
    trials: list[str]  # the trials it ended (Tune's trial ids)

    @property
    def field(self) -> str:
        return f"stop.{BUDGET_FIELDS[self.budget]}"

    def spent_words(self) -> str:
        if self.budget == "wall_time":
            return f"{self.spent:.0f} s"
        return f"{self.spent:,.0f} env steps"


def write_ran_out(results_dir: Path, record: BudgetRanOut) -> None:
    write_atomic(results_dir / BUDGET_FILE, json.dumps(asdict(record), indent=1) + "\n")


def record_ran_out(results_dir: Path, stop: StopSection, stopper: Any) -> None:
    """Writes what the stopper (RulesStopper) saw when its budget (a rule of the
    experiment's ``stop`` section) ended the run."""
    field = BUDGET_FIELDS[stopper.ran_out]
    spent = stopper.wall_time_spent() if stopper.ran_out == "wall_time" else stopper.env_steps_spent
    write_ran_out(
        results_dir,
        BudgetRanOut(
            budget=stopper.ran_out,
            limit=float(getattr(stop, field)),
            spent=float(spent),
            trials=list(stopper.budget_stopped),
        ),
    )


def save_stop_rules(results_dir: Path, stop: dict[str, Any]) -> None:
    """Puts a resume's stop rules in the saved experiment (RESOLVED_FILE), so that later
    resumes and inspections read the rules the population now runs under."""
    import yaml

    path = results_dir / RESOLVED_FILE
    text = path.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    data = yaml.safe_load(text)
    data["stop"] = stop
    write_atomic(path, header + yaml.safe_dump(data, sort_keys=False))


def read_ran_out(results_dir: Path) -> BudgetRanOut | None:
    """The record of the budget that ended the population (None: none did, or it was
    extended since). A damaged record counts as none: the population is then finished."""
    try:
        data = json.loads((results_dir / BUDGET_FILE).read_text())
        record = BudgetRanOut(
            budget=str(data["budget"]),
            limit=float(data["limit"]),
            spent=float(data["spent"]),
            trials=[str(t) for t in data["trials"]],
        )
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return record if record.budget in BUDGET_FIELDS else None


def clear_ran_out(results_dir: Path) -> None:
    (results_dir / BUDGET_FILE).unlink(missing_ok=True)


def overridden_stop_keys(overrides: list[str], file: str) -> set[str]:
    """The stop rules a resume's ``--set key=value`` change; ExperimentError (exit 2) for
    any other field: a resume goes on with the population it has, and only its stop rules
    may change."""
    keys: set[str] = set()
    problems = []
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if key.startswith("stop.") and len(key) > len("stop."):
            keys.add(key)
        else:
            problems.append(
                Problem(
                    file,
                    key,
                    f"`resume --set {item}`: a resume changes only the stop rules (stop.*, "
                    "for example stop.wall_time_s=600); the rest of a population stays as it "
                    "started (`workbench run` starts a new one)",
                )
            )
    if problems:
        raise ExperimentError(problems)
    return keys


def trials_to_reopen(
    results_dir: Path,
    stop: Any,
    changed: set[str],
    statuses: dict[str, str],
    file: str,
) -> list[str]:
    """The trials a resume with these stop rules (``stop``, the experiment's, after
    --set) opens again: those the recorded budget ended, when the new one is larger.
    ExperimentError when ``changed`` names that budget and the new value does not extend
    it."""
    record = read_ran_out(results_dir)
    if record is None:
        return []
    new = getattr(stop, BUDGET_FIELDS[record.budget])
    if new is not None and new <= record.spent:
        if record.field in changed:
            raise ExperimentError.single(
                file,
                record.field,
                f"{new:g} does not extend the budget: the population has spent "
                f"{record.spent_words()} of it; give more than {record.spent:.0f}, or "
                f"remove the rule with `--set {record.field}=null`",
            )
        return []
    return [t for t in record.trials if statuses.get(t) == "TERMINATED"]


def finished_note(results_dir: Path) -> str:
    """What `resume` adds to "has finished" when a budget ended the population."""
    record = read_ran_out(results_dir)
    if record is None:
        return ""
    return (
        f" Its budget ({record.field} {record.limit:g}) ended it; `workbench resume "
        f"{results_dir.name} --set {record.field}=N` with N above {record.spent:.0f} goes on."
    )
