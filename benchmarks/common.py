"""What the benchmark scripts share: the machine's description, CPU pinning, median/min/max
figures, interleaved rounds, and reading back what a ``workbench run`` wrote.

Standard library only at import time (``benchmarks/zoo_reference.py`` imports it from RL Zoo's
own virtualenv, which has neither the workbench nor its dependencies). A script run as a file
(``python benchmarks/NAME.py``) puts the repository root on ``sys.path`` before importing it::

    if __package__ in (None, ""):  # run as a file: python benchmarks/NAME.py
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.common import ...

The figures each script produced, with the commands, are in ``docs/benchmarks/``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

ROOT = Path(__file__).resolve().parents[1]
# The main experiment (`make run`), which most benchmarks measure or start from.
EXPERIMENT = ROOT / "experiments" / "cartpole_pbt.yaml"
# Where RLlib 2.60 reports an iteration's mean return, as nested keys of a result row.
RETURN_METRIC = ("env_runners", "episode_return_mean")

Case = TypeVar("Case")
Figure = TypeVar("Figure")


# --- the machine -------------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (a VM may show only the family)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def pin_to_one_cpu(cpu: int | None = None, default: Literal["first", "last"] = "first") -> int:
    """Pins this process, and the threads it starts later, to one CPU; returns which.

    `cpu` None takes the first or the last CPU this process may run on (`default`)."""
    allowed = sorted(os.sched_getaffinity(0))
    chosen = cpu if cpu is not None else allowed[0] if default == "first" else allowed[-1]
    if chosen not in allowed:
        raise SystemExit(f"CPU {chosen} is not in this process's allowed CPUs {allowed}")
    os.sched_setaffinity(0, {chosen})
    return chosen


def command_line() -> str:
    """The command that started this script, for the first line of its output."""
    return " ".join([sys.executable, *sys.argv])


# --- figures -----------------------------------------------------------------------------------


def median_min_max(values: Sequence[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def spread(values: Sequence[float], fmt: str = ".1f", unit: str = "", empty: str = "n/a") -> str:
    """'median [min-max]' (the unit after the median), or `empty` when there is no value."""
    if not values:
        return empty
    median, low, high = (format(v, fmt) for v in median_min_max(values))
    return f"{median}{unit} [{low}-{high}]"


def interleaved(
    rounds: int,
    cases: Sequence[Case],
    measure: Callable[[Case], Figure],
    *,
    alternate: bool = False,
    label: str = "round",
) -> list[list[Figure]]:
    """Measures every case once per round, round after round, so that a disturbance of the
    machine hits all cases alike; `alternate` reverses the order in odd rounds. Returns each
    case's figures, one per round, in the order of `cases`, and says on stderr when a round
    is done."""
    figures: list[list[Figure]] = [[] for _ in cases]
    for round_ in range(rounds):
        order = list(enumerate(cases))
        if alternate and round_ % 2 == 1:
            order.reverse()
        for i, case in order:
            figures[i].append(measure(case))
        print(f"{label} {round_ + 1}/{rounds} done", file=sys.stderr, flush=True)
    return figures


def by_population_size(
    argv: list[str] | None,
    doc: str,
    header: Sequence[str],
    row: Callable[[int, Path, int, int], str],
    count: tuple[str, str],
) -> int:
    """The driver-side snapshot benchmarks' main: one table row a population size (``row``
    with the size, a temporary folder, the rounds and ``count``'s number), under a header
    with the command, the machine and its load."""
    import argparse
    import datetime
    import tempfile

    flag, help_text = count
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--sizes", default="4,16,32,64")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(flag, type=int, default=8, dest="count", help=help_text)
    parser.add_argument("--quick", action="store_true", help="a smoke run (the test)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.quick:
        sizes, args.rounds, args.count = [4], 1, 2
    now = datetime.datetime.now(datetime.timezone.utc)
    print("command:", command_line())
    print(
        f"{now:%Y-%m-%d %H:%M:%S} UTC; {os.cpu_count()} CPUs ({cpu_model()}), load average "
        f"{os.getloadavg()[0]:.1f} at the start; python {platform.python_version()}"
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---:|" * len(header))
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            line = row(size, Path(tmp), args.rounds, args.count)
        print(line, flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


# --- what a workbench run wrote ----------------------------------------------------------------


def number_at(row: dict[str, Any], *keys: str) -> float | None:
    """The finite number under nested `keys` of a result row, else None."""
    value: object = row
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def read_trials(results_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Each trial's result.json rows, in order (a partly written last line is skipped)."""
    trials: dict[str, list[dict[str, Any]]] = {}
    for result_file in sorted(results_dir.glob("*/result.json")):
        rows = []
        for line in result_file.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        trials[result_file.parent.name] = rows
    return trials


def first_crossing(
    trials: dict[str, list[dict[str, Any]]],
    threshold: float,
    started_at: float,
    metric: tuple[str, ...] = RETURN_METRIC,
) -> tuple[float | None, float | None, str | None, float]:
    """(time_total_s, seconds since `started_at` (epoch), trial) of the earliest row whose
    ``metric`` (RLlib's iteration mean by default) reaches `threshold`, and the best value
    of any row (nan when none had one)."""
    best_time: float | None = None
    best_launch: float | None = None
    reached_by: str | None = None
    best_return = math.nan
    for name, rows in trials.items():
        for row in rows:
            value = number_at(row, *metric)
            if value is None:
                continue
            if math.isnan(best_return) or value > best_return:
                best_return = value
            if value < threshold:
                continue
            total = float(row["time_total_s"])
            if best_time is None or total < best_time:
                best_time, reached_by = total, name
            stamp = row.get("timestamp")
            if isinstance(stamp, int | float):
                since = float(stamp) - started_at
                if best_launch is None or since < best_launch:
                    best_launch = since
            break  # the first crossing of this trial
    return best_time, best_launch, reached_by, best_return


def workbench_command() -> list[str]:
    """The venv's `workbench` script next to this interpreter, else the CLI module."""
    script = Path(sys.executable).with_name("workbench")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "workbench.cli"]


def experiment_name(experiment: Path, sets: Sequence[str]) -> str:
    """The results folder's name: a `--set name=...` among `sets`, else the file's name."""
    for item in sets:
        key, _, value = item.partition("=")
        if key.strip() == "name":
            return value.strip()
    import yaml

    return str(yaml.safe_load(experiment.read_text())["name"])


def run_logged(
    command: Sequence[str], log: Path, cwd: Path | None = ROOT
) -> tuple[int, float, float]:
    """Runs `command` with its output in `log`: (exit status, start as epoch seconds, wall s)."""
    started_at = time.time()
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, check=False)
    return done.returncode, started_at, time.perf_counter() - start


def print_log_tail(log: Path, lines: int, header: str) -> None:
    """`header`, then the last `lines` lines of `log`, indented (after a failed command)."""
    print(header)
    for line in log.read_text().splitlines()[-lines:]:
        print(f"    {line}")


@dataclass(frozen=True)
class FitWindow:
    """When Tune's ``fit()`` ran: its seconds (perf counter) and its end (epoch seconds),
    and the CPU seconds the driver's process used meanwhile (all its threads)."""

    seconds: float
    ended_at: float
    cpu_s: float = 0.0

    @property
    def started_at(self) -> float:
        return self.ended_at - self.seconds


def timed_launch_run(resolved: Any) -> tuple[Any, FitWindow]:
    """``workbench.run.launch.run`` of a resolved experiment, quiet, and when its Tune
    ``fit()`` ran (the clock a plain ``tuner.fit()`` is timed by). Imports the workbench
    only when called."""
    from workbench.run import launch

    windows: list[FitWindow] = []
    original = launch.fit

    def timed_fit(tuner: Any, *fit_args: Any) -> tuple[Any, float, bool]:
        cpu = time.process_time()
        results, elapsed, signalled = original(tuner, *fit_args)
        cpu = time.process_time() - cpu
        windows.append(FitWindow(seconds=elapsed, ended_at=time.time(), cpu_s=cpu))
        return results, elapsed, signalled

    launch.fit = timed_fit
    try:
        summary = launch.run(resolved, progress_interval_s=1e9)
    finally:
        launch.fit = original
    return summary, windows[0]


def outside_train_split(
    trials: dict[str, list[dict[str, Any]]], window: FitWindow
) -> dict[str, float]:
    """The trials' slot time outside ``train()`` (``len(trials) x fit wall``, every trial
    running from the start of ``fit()`` to its end), in three shares of that slot time:

    * ``outside_before``: before each trial's first result, less that iteration: Ray placing
      the trial, its process importing torch and RLlib, the algorithm's build;
    * ``outside_between``: between its results, less their iterations: Tune's loop and
      callbacks, checkpoints, the restores of PBT exploits, waiting to be scheduled again;
    * ``outside_after``: after its last result: its last checkpoint, the actor stopping,
      ``fit()`` returning.

    The three add up to ``1 - sum(time_this_iter_s) / slot``. Tune stamps a result with
    whole seconds (``timestamp``), so each part is good to a second a trial (a short part
    can come out a little below 0)."""
    slot_s = len(trials) * window.seconds
    before = between = after = 0.0
    for rows in trials.values():
        if not rows:
            before += window.seconds
            continue
        first, last = rows[0], rows[-1]
        before += float(first["timestamp"]) - window.started_at - float(first["time_this_iter_s"])
        between += float(last["timestamp"]) - float(first["timestamp"])
        between -= sum(float(r["time_this_iter_s"]) for r in rows[1:])
        after += window.ended_at - float(last["timestamp"])
    if slot_s <= 0:
        return {}
    return {
        "outside_before": before / slot_s,
        "outside_between": between / slot_s,
        "outside_after": after / slot_s,
    }
