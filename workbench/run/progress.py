"""The population as a person watches it, and the record of each trial's hyperparameters.

One row per trial, in a stable order (the trial's name), with the names the user knows
(``PPO_00001``, ``lambda_``); the time spent and the wall-time budget left; a bar toward
the stop rule; each PBT exploit as one line (``PPO_00000 <- PPO_00002 @ it 8: lr 5.6e-4
-> 5.4e-5``). On a terminal it is one table that redraws in place (rich's ``Live``); to a
pipe or a file, plain lines: each trial's start and end, each exploit, a status line every
``interval_s`` and the table once at the end.

Why rich and not Tune's reporter: Tune's reporters print a new table on every update (they
never redraw), name trials by Ray's ids and hyperparameters by Tune's keys, and know
nothing of exploits or of the workbench's stop rules; ``Live`` redraws in place, puts
other output above the table and falls back to nothing special when there is no terminal.
"""

from __future__ import annotations

import math
import numbers
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from ray.tune import Callback
from ray.tune.utils import flatten_dict

from workbench.lineage_record import ExploitDecision
from workbench.names import RETURN_METRIC, SCORE_METRIC, STEP_METRIC, STEPS_METRIC

# The rules whose progress is the return: the closer to the target, the further along.
RETURN_KEYS = (RETURN_METRIC, SCORE_METRIC)
_RULE_NAMES = {
    RETURN_METRIC: "return",
    SCORE_METRIC: "score",
    STEP_METRIC: "iterations",
    STEPS_METRIC: "env steps",
    "time_total_s": "trial seconds",
}
_DONE = ("TERMINATED", "ERROR")


@dataclass
class TrialRecord:
    name: str
    status: str = "PENDING"
    iteration: int = 0
    env_steps: int = 0
    # The score when trials report one (SCORE_METRIC), else the iteration's mean return.
    last_return: float = math.nan
    best_return: float = math.nan
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    # (iteration, values): the first iteration trained with each set of searched values
    # (as `workbench show` numbers them).
    schedule: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None
    # The last value of each stop rule's metric (the bar toward the stop rule).
    rule_values: dict[str, float] = field(default_factory=dict)
    # Which metric last_return holds.
    return_metric: str = RETURN_METRIC


def number(value: Any) -> str:
    """A value as the live view and the exploit lines show it: 5.6e-4, 0.95, 128."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return "-" if value is None else str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    x = float(value)
    if math.isnan(x):
        return "-"
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e6):
        mantissa, exponent = f"{x:.1e}".split("e")
        return f"{mantissa.removesuffix('.0')}e{int(exponent)}"
    return f"{x:.4g}"


def metric_label(metric: str) -> str:
    """How the view and the summary call the metric a trial's return column holds."""
    return _RULE_NAMES.get(metric, metric)


def clock(seconds: float) -> str:
    """0:07, 4:33, 1:02:09."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass(frozen=True)
class StopGoal:
    """The experiment's stop rules, for the bar: how far the population is toward them."""

    rules: dict[str, float] = field(default_factory=dict)  # metric -> threshold
    wall_time_s: float | None = None
    population: int = 1
    # The whole population stops once one trial reaches the return target (PBT, PB2).
    all_at_return: bool = False
    env_step_budget: int | None = None  # stop.population_env_steps

    def describe(self) -> str:
        parts = [f"{_RULE_NAMES.get(k, k)} {number(v)}" for k, v in self.rules.items()]
        if self.wall_time_s is not None:
            parts.append(f"{clock(self.wall_time_s)} budget")
        if self.env_step_budget is not None:
            parts.append(f"{self.env_step_budget:,} env steps in all")
        return ", ".join(parts) or "no stop rule"

    def fraction(self, records: list[TrialRecord], elapsed_s: float, sampled: int = 0) -> float:
        """0..1: the rule nearest to ending the run (a budget or the trials'); ``sampled``:
        the env steps the trials have sampled together."""
        return self.nearest(records, elapsed_s, sampled)[0]

    def nearest(
        self, records: list[TrialRecord], elapsed_s: float, sampled: int = 0
    ) -> tuple[float, str]:
        """The fraction of the rule nearest to ending the run, and that rule in words
        ("of the 1:00 budget", "toward return 475"): the bar names what it measures."""
        rules = ", ".join(f"{_RULE_NAMES.get(k, k)} {number(v)}" for k, v in self.rules.items())
        options: list[tuple[float, str]] = []
        if self.wall_time_s:
            options.append(
                (elapsed_s / self.wall_time_s, f"of the {clock(self.wall_time_s)} budget")
            )
        if self.env_step_budget:
            options.append(
                (sampled / self.env_step_budget, f"of {self.env_step_budget:,} env steps")
            )
        per_trial = [self._trial_fraction(r) for r in records]
        if per_trial:
            # Trials not yet created count as not started.
            share = sum(per_trial) / max(self.population, len(per_trial))
            options.append((share, f"toward {rules}" if rules else "of the trials done"))
        if self.all_at_return and records:
            best = max(self._return_fraction(r) for r in records)
            returns = [
                f"{_RULE_NAMES.get(k, k)} {number(v)}"
                for k, v in self.rules.items()
                if k in RETURN_KEYS
            ]
            options.append((best, f"toward {', '.join(returns) or rules}"))
        if not options:
            return 0.0, "toward no stop rule"
        done, label = max(options, key=lambda option: option[0])
        return min(1.0, max(0.0, done)), label

    def _trial_fraction(self, record: TrialRecord) -> float:
        if record.status in _DONE:
            return 1.0
        fractions = [0.0]
        for key, threshold in self.rules.items():
            if key in RETURN_KEYS:
                fractions.append(self._return_fraction(record))
                continue
            value = record.rule_values.get(key)
            if value is not None and threshold > 0:
                fractions.append(value / threshold)
        return min(1.0, max(fractions))

    def _return_fraction(self, record: TrialRecord) -> float:
        # Only a positive target and return make a fraction (-200 of -150 is no "133%").
        for key in RETURN_KEYS:
            threshold = self.rules.get(key)
            value = record.rule_values.get(key)
            if threshold and threshold > 0 and value is not None and value > 0:
                return min(1.0, value / threshold)
        return 0.0


class ProgressTable(Callback):  # type: ignore[misc]
    """The population's rows (a Tune callback in the driver) and how they are shown:
    ``showing()`` around ``Tuner.fit`` draws them live (see the module's doc)."""

    def __init__(
        self,
        hyperparameters: dict[str, str],
        interval_s: float = 30.0,
        stream: TextIO | None = None,
        *,
        title: str = "",
        goal: StopGoal | None = None,
    ) -> None:
        # tune key -> the name the user wrote
        self.hyperparameters = hyperparameters
        self.interval_s = interval_s
        self.stream = stream  # None: sys.stdout when shown (Tune pickles callbacks)
        self.title = title
        self.goal = goal or StopGoal()
        self.records: dict[str, TrialRecord] = {}
        self.exploits: list[str] = []  # the exploit lines, in order
        # The experiment's stopper (launch sets it): it counts the env steps the trials
        # have sampled together, across a resume too, for the bar toward a step budget.
        self.stopper: Any = None
        self.started = time.monotonic()
        self.last_print = 0.0
        self._announced: set[str] = set()  # the trials whose start was shown
        self._lock = threading.RLock()
        self._view: _View | None = None

    @property
    def sampled(self) -> int:
        """The env steps the trials have sampled together (0 without a stopper)."""
        return int(getattr(self.stopper, "env_steps_spent", 0))

    def budget_elapsed(self) -> float:
        """The seconds stop.wall_time_s has counted: earlier sessions' too, when resumed."""
        spent = getattr(self.stopper, "wall_time_spent", None)
        return float(spent()) if spent is not None else time.monotonic() - self.started

    # --- Tune callback hooks ------------------------------------------------------------
    def on_step(self, iteration: int, trials: list[Any], **info: Any) -> None:
        with self._lock:
            for trial in trials:
                record = self._record(trial)
                status = str(getattr(trial, "status", record.status))
                if record.status != "ERROR" or status == "ERROR":
                    record.status = status
        if self._view is not None:
            self._view.tick()

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        with self._lock:
            record = self._record(trial)
            record.status = "RUNNING"
            first = trial.trial_id not in self._announced
            self._announced.add(trial.trial_id)
        if first:
            values = ", ".join(f"{k} {number(v)}" for k, v in record.hyperparameters.items())
            # A resumed population's trials go on from where the last driver left them.
            verb = f"resumed at iteration {record.iteration}" if record.iteration else "started"
            self._event(f"{record.name} {verb}" + (f": {values}" if values else ""), plain=True)

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        used = result.get("config")
        flat = flatten_dict(result, delimiter="/")
        with self._lock:
            record = self._record(trial)
            record.status = "RUNNING"
            record.iteration = int(flat.get(STEP_METRIC, record.iteration))
            record.env_steps = int(flat.get(STEPS_METRIC, record.env_steps) or 0)
            for key in (*self.goal.rules, *RETURN_KEYS):
                value = _real(flat.get(key))
                if value is not None:
                    record.rule_values[key] = value
            score = _real(flat.get(SCORE_METRIC))
            value = score if score is not None else _real(flat.get(RETURN_METRIC))
            if value is not None:
                record.return_metric = SCORE_METRIC if score is not None else RETURN_METRIC
                record.last_return = value
                if math.isnan(record.best_return) or value > record.best_return:
                    record.best_return = value
            # The values this result was trained with: the trainable's config, not the
            # trial's (PBT may already have changed that for the next iteration).
            trained = self._values(used if isinstance(used, dict) else trial.config)
            if not record.schedule or record.schedule[-1][1] != trained:
                record.schedule.append((record.iteration, trained))
            record.hyperparameters = self._values(trial.config)
        self._tick()

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        with self._lock:
            record = self._record(trial)
            record.status = "TERMINATED"
        self._event(
            f"{record.name} finished at iteration {record.iteration}: "
            f"{_RULE_NAMES[record.return_metric]} {number(record.last_return)}",
            plain=True,
        )

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        with self._lock:
            record = self._record(trial)
            record.status = "ERROR"
            record.error = str(getattr(trial, "error_file", "") or "") or None
        where = f" (its error: {record.error})" if record.error else ""
        self._event(f"{record.name} failed at iteration {record.iteration}{where}")

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        with self._lock:
            for record in self.records.values():
                if record.status in ("RUNNING", "PENDING", "PAUSED"):
                    record.status = "STOPPED"  # the experiment ended around it

    def on_exploit(self, decision: ExploitDecision) -> None:
        """Lineage listener (workbench.tune_ext.pbt.ExploitRecorder): one line per exploit."""
        self._event(self.exploit_line(decision))

    # --- state across a resume (Tune hands it back by the callback's position) ------
    def get_state(self) -> dict[str, Any] | None:
        with self._lock:
            if not self.records:
                return None
            return {"records": {k: asdict(r) for k, r in self.records.items()}}

    def set_state(self, state: dict[str, Any]) -> None:
        with self._lock:
            for trial_id, saved in state.get("records", {}).items():
                fields = {k: v for k, v in saved.items() if k in TrialRecord.__dataclass_fields__}
                fields["schedule"] = [(int(i), dict(v)) for i, v in fields.get("schedule", [])]
                self.records[trial_id] = TrialRecord(**fields)

    # --- what is shown ------------------------------------------------------------------
    def exploit_line(self, decision: ExploitDecision) -> str:
        with self._lock:
            target = self._name_of(decision.target)
            source = self._name_of(decision.source)
        old, new = decision.old, decision.new
        changes = [
            f"{self.hyperparameters.get(k, k)} {number(old.get(k))} -> {number(new[k])}"
            for k in new
            if old.get(k) != new[k]
        ]
        at = decision.exploit_iteration
        return f"{target} <- {source} @ it {at}: " + (", ".join(changes) or "values kept")

    def rows(self) -> list[TrialRecord]:
        """One per trial, by name (a stable order: Tune reports in any)."""
        with self._lock:
            return sorted(self.records.values(), key=lambda r: r.name)

    def table_lines(self) -> list[str]:
        """The table as plain text: a header and one line per trial."""
        headers, rows = self.cells(self.rows())
        widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(headers)]
        right = {2, 3, 4, 5}

        def line(cells: list[str]) -> str:
            return "  ".join(
                c.rjust(w) if i in right else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()

        return [line(headers)] + [line(row) for row in rows]

    def status_line(self) -> str:
        """Elapsed, the budget left, the bar toward the stop rule and the best trial."""
        elapsed = time.monotonic() - self.started
        budgeted = self.budget_elapsed()
        rows = self.rows()
        done, label = self.goal.nearest(rows, budgeted, self.sampled)
        parts = [f"{clock(elapsed)} elapsed"]
        if self.goal.wall_time_s is not None:
            parts.append(f"{clock(max(0.0, self.goal.wall_time_s - budgeted))} left")
        bar = "#" * round(done * 20)
        parts.append(f"[{bar:<20}] {done:4.0%} {label}")
        scored = [r for r in rows if not math.isnan(r.best_return)]
        if scored:
            best = max(scored, key=lambda r: r.best_return)
            parts.append(
                f"best {best.name} {_RULE_NAMES[best.return_metric]} {number(best.best_return)}"
            )
        running = sum(r.status == "RUNNING" for r in rows)
        parts.append(f"{running} running, {sum(r.status in _DONE for r in rows)} done")
        return " | ".join(parts)

    def cells(self, rows: list[TrialRecord]) -> tuple[list[str], list[list[str]]]:
        score = any(r.return_metric == SCORE_METRIC for r in rows)
        names = list(self.hyperparameters.values())
        headers = ["trial", "status", "iter", "env steps", "score" if score else "return", "best"]
        cells = [
            [
                r.name,
                r.status,
                str(r.iteration),
                str(r.env_steps),
                number(r.last_return),
                number(r.best_return),
                *(number(r.hyperparameters.get(n)) for n in names),
            ]
            for r in rows
        ]
        return headers + names, cells

    @contextmanager
    def showing(self, stream: TextIO | None = None) -> Iterator[ProgressTable]:
        """Shows the population while the block runs (Tuner.fit): live on a terminal,
        plain lines otherwise; the table once more at the end."""
        out = stream or self.stream or sys.stdout
        self.started = time.monotonic()
        self.last_print = self.started
        view: _View = _LiveView(self, out) if _is_terminal(out) else _PlainView(self, out)
        self._view = view
        try:
            view.start()
            yield self
        finally:
            self._view = None
            view.stop()

    # --- helpers ----------------------------------------------------------------------
    def _record(self, trial: Any) -> TrialRecord:
        record = self.records.get(trial.trial_id)
        if record is None:
            record = self.records[trial.trial_id] = TrialRecord(name=str(trial))
            record.hyperparameters = self._values(trial.config)
        return record

    def _name_of(self, trial_id: Any) -> str:
        record = self.records.get(str(trial_id))
        return record.name if record is not None else str(trial_id)

    def _values(self, config: dict[str, Any]) -> dict[str, Any]:
        return {name: config.get(key) for key, name in self.hyperparameters.items()}

    def _event(self, line: str, plain: bool = False) -> None:
        """A line above the table (a terminal) or on its own (a pipe). ``plain``: only
        in plain output (the live table shows it already)."""
        if self._view is not None:
            self._view.event(line, plain)

    def _tick(self) -> None:
        if self._view is not None:
            self._view.tick()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["stream"] = None
        state["_view"] = None
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()


def _real(value: Any) -> float | None:
    # numbers.Real: RLlib reports some means as numpy.float32, not a Python float.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    x = float(value)
    return None if math.isnan(x) else x


def _is_terminal(stream: TextIO) -> bool:
    from rich.console import Console

    console = Console(file=stream)
    return console.is_terminal and not console.is_dumb_terminal


class _View:
    def __init__(self, table: ProgressTable, stream: TextIO) -> None:
        self.table = table
        self.stream = stream

    def start(self) -> None: ...

    def event(self, line: str, plain: bool) -> None: ...

    def tick(self) -> None: ...

    def stop(self) -> None: ...


class _PlainView(_View):
    """Not a terminal: each event a line, a status line every ``interval_s``, the table
    at the end."""

    def _print(self, *lines: str) -> None:
        print("\n".join(lines), file=self.stream, flush=True)

    def event(self, line: str, plain: bool) -> None:
        self._print(line)

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.table.last_print >= self.table.interval_s:
            self.table.last_print = now
            self._print(self.table.status_line())

    def stop(self) -> None:
        if self.table.records:
            self._print(self.table.status_line(), *self.table.table_lines())


class _LiveView(_View):
    """A terminal: rich's Live redraws the table in place; events go above it."""

    def start(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(file=self.stream, highlight=False)
        self.live = Live(
            get_renderable=self._render,
            console=self.console,
            refresh_per_second=2,
            transient=False,
            redirect_stdout=True,
            redirect_stderr=True,
        )
        self.live.start()

    def event(self, line: str, plain: bool) -> None:
        if not plain:
            self.live.console.print(
                fit_line(line, self.console.width), markup=False, highlight=False, soft_wrap=True
            )

    def stop(self) -> None:
        self.live.refresh()
        self.live.stop()

    def _render(self) -> Any:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        table = self.table
        width = self.console.width
        elapsed = time.monotonic() - table.started
        budgeted = table.budget_elapsed()
        rows = table.rows()
        done, label = table.goal.nearest(rows, budgeted, table.sampled)
        left = table.goal.wall_time_s
        clocks = f"{clock(elapsed)} elapsed" + (
            f", {clock(max(0.0, left - budgeted))} left" if left is not None else ""
        )
        title = Text(fit_line(f"{table.title}: {clocks}", width), style="bold", no_wrap=True)
        bar = Table.grid(padding=(0, 1))
        bar.add_column(no_wrap=True)
        bar.add_column(no_wrap=True, overflow="ellipsis")
        bar.add_row(
            ProgressBar(total=1.0, completed=done, width=24),
            Text(f"{done:4.0%} {label}"),
        )
        headers, cells = table.cells(rows)
        natural = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
        shown = _columns_that_fit(natural, width)
        # One space between columns (rich's (0, 1) pads both sides).
        grid = Table(box=None, padding=(0, 1, 0, 0), show_edge=False, pad_edge=False)
        for i in shown:
            grid.add_column(
                headers[i],
                justify="right" if i in (2, 3, 4, 5) else "left",
                no_wrap=True,
                min_width=natural[i],
            )
        styles = {"RUNNING": "green", "ERROR": "red", "PAUSED": "yellow"}
        for row, record in zip(cells, rows, strict=True):
            grid.add_row(*(row[i] for i in shown), style=styles.get(record.status, ""))
        parts: list[Any] = [title, bar, grid]
        hidden = [headers[i] for i in range(len(headers)) if i not in shown]
        if hidden:
            note = f"not shown (too narrow): {', '.join(hidden)}"
            parts.append(Text(fit_line(note, width), style="dim", no_wrap=True))
        return Group(*parts)


_FIXED_COLUMNS = 6  # trial, status, iter, env steps, score, best: always shown


def _columns_that_fit(natural: list[int], width: int) -> list[int]:
    """The table's columns (by their natural widths) that fit in ``width``: the trial's
    own ones always, then the hyperparameters in order while they fit (a narrow terminal
    drops the last ones rather than cutting every column short)."""
    shown = list(range(min(_FIXED_COLUMNS, len(natural))))
    used = sum(natural[i] + 1 for i in shown)
    for i in range(len(shown), len(natural)):
        if used + natural[i] + 1 > width:
            break
        shown.append(i)
        used += natural[i] + 1
    return shown


def fit_line(line: str, width: int) -> str:
    """An event line cut to the terminal's width at a ", " (a change of an exploit
    line), saying how many changes it left out: one line, however many values."""
    if len(line) <= width:
        return line
    parts = line.split(", ")
    for keep in range(len(parts) - 1, 0, -1):
        cut = ", ".join(parts[:keep]) + f", ... (+{len(parts) - keep})"
        if len(cut) <= width:
            return cut
    return line[: max(1, width - 1)] + "…"
