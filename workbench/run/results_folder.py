"""A population's results folder: the saved experiment that names it, and what Tune's
last snapshot says of its trials. Light, so the CLI can find a folder, or say there is
none, before it imports anything heavy: no Ray, no RLlib, except Ray's unpickler for Tune's
search state, read only when every trial has ended."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
from pathlib import Path

from workbench.errors import ExperimentError
from workbench.names import RESOLVED_FILE
from workbench.run.folder_lock import lock_path

# An experiment's name, at most 100 characters (workbench.experiment.schema), fits with it.
STAMP_FORMAT = "%Y%m%d-%H%M%S"
_STAMPED = r"_\d{8}-\d{6}(-\d+)?"
_NAME_LIMIT = 100


def population_statuses(results_dir: Path) -> dict[str, str]:
    """Trial id -> Tune status, from the newest experiment-state snapshot ({} if none).

    Raises ExperimentError (exit 2) when the snapshot is not one Tune could resume from
    (truncated, edited, a folder): said before Ray starts, not as Tune's traceback."""
    snapshots = sorted(results_dir.glob("experiment_state-*.json"))
    if not snapshots:
        return {}
    newest = snapshots[-1]
    try:
        data = json.loads(newest.read_text())
        out: dict[str, str] = {}
        for trial_json, _runtime in data["trial_data"]:
            trial = json.loads(trial_json)
            out[str(trial["trial_id"])] = str(trial["status"])
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as err:
        why = err.strerror if isinstance(err, OSError) else f"{type(err).__name__}: {err}"
        raise ExperimentError.single(
            str(newest),
            "",
            f"Tune's experiment state cannot be read ({why}); it is truncated or was edited, "
            "so the population cannot be resumed from it. Put back an intact copy, or start "
            "the experiment anew with `workbench run`",
        ) from None
    return out


# Tune's search state beside the experiment state: the searcher's (Optuna's, wrapped in
# Ray's SearchGenerator) or the random and grid search's (BasicVariantGenerator).
SEARCH_STATE_FILES = ("search_gen_state-*.json", "basic-variant-state-*.json")


def search_has_more(results_dir: Path, created: int) -> bool:
    """Whether Tune's saved search would still create trials: it has made ``created`` of
    the population's, is not finished (a stop rule that ends the population finishes it)
    and has more to make. A searcher with a concurrency limit makes trials one by one, so a
    population stopped between one trial's end and the next one's start has every trial
    ended and still trials to run. False where no search state was saved.

    Raises ExperimentError (exit 2) when the state cannot be read, as Tune's restore could not.
    """
    for pattern in SEARCH_STATE_FILES:
        snapshots = sorted(results_dir.glob(pattern))
        if snapshots:
            break
    else:
        return False
    newest = snapshots[-1]
    from ray import cloudpickle  # its pickle names Tune's classes: import Ray only now

    try:
        with newest.open("rb") as f:
            state = cloudpickle.load(f)
        if not isinstance(state, dict):
            raise TypeError(f"a {type(state).__name__}, not Tune's state")
    except Exception as err:  # any unpickling failure is a damaged file
        raise ExperimentError.single(
            str(newest),
            "",
            f"Tune's search state cannot be read ({type(err).__name__}: {err}); it is "
            "truncated or was edited, so the population cannot be resumed from it. Put back "
            "an intact copy, or start the experiment anew with `workbench run`",
        ) from None
    # SearchGenerator's get_state() and BasicVariantGenerator's __dict__ name them apart.
    finished = bool(state.get("finished", state.get("_finished", False)))
    total = int(state.get("total_samples", state.get("_total_samples", 0)) or 0)
    return not finished and created < total


def population_name(
    storage: Path, base: str, *, now: dt.datetime | None = None, reserve: bool = True
) -> str:
    """A new population's name: the experiment's, then the time it starts
    (``cartpole_pbt_20260130-141502``), then ``-2``, ``-3``... when that name is taken.

    ``reserve`` takes the name at once, atomically, by creating the population's lock
    file (`workbench.run.folder_lock`, beside the folder): two runs started in the same
    second get two names, and a refused run still leaves no results folder.
    """
    stamp = (now or dt.datetime.now()).strftime(STAMP_FORMAT)
    for n in range(1, 10_000):
        suffix = f"_{stamp}" + (f"-{n}" if n > 1 else "")
        name = base[: _NAME_LIMIT - len(suffix)] + suffix
        folder = storage / name
        if folder.exists() or lock_path(folder).exists():
            continue
        if not reserve:
            return name
        storage.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(lock_path(folder), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            continue  # another run took it a moment ago
        return name
    raise ExperimentError.single(str(storage), "storage", f"no free name for {base!r}")


def unreserve(results_dir: Path, *, storage_was_new: bool) -> None:
    """Gives back a name `population_name` took for a run refused before it wrote its
    folder: its lock file removed, and the storage folder too when the reservation made
    it and nothing else is in it. A run that got as far as its folder keeps both."""
    if results_dir.exists():
        return
    lock_path(results_dir).unlink(missing_ok=True)
    if storage_was_new:
        with contextlib.suppress(OSError):
            results_dir.parent.rmdir()


def newest_population(storage: Path, base: str) -> Path | None:
    """The newest results folder of the populations named after ``base`` (its timestamped
    runs), or None."""
    pattern = re.compile(re.escape(base) + _STAMPED)
    found = [
        p
        for p in storage.glob(f"{glob_escape(base)}_*")
        if pattern.fullmatch(p.name) and (p / RESOLVED_FILE).is_file()
    ]
    if not found:
        return None
    return max(found, key=lambda p: _stamp_order(p.name[len(base) + 1 :]))


def _stamp_order(stamp: str) -> tuple[str, int]:
    """``20260130-141502-3`` -> (``20260130-141502``, 3): time, then the number in it."""
    time, _, n = stamp.partition("-")[2].partition("-")
    return stamp[: 9 + len(time)], int(n) if n else 1


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def find_results_dir(ref: str, storage: str = "results") -> Path:
    """A population's results folder from its path or its name; an experiment's name
    means its newest population (``<name>_<time>``, as `workbench run` names them).

    Raises ExperimentError (exit 2) naming what was tried when there is nothing to resume.
    """
    # An absolute ref is the same path under any storage: try it once.
    candidates = list(dict.fromkeys([Path(ref), Path(storage) / ref]))
    if not any((p / RESOLVED_FILE).is_file() for p in candidates):
        # A name, or a path ending in one (`results/cartpole_pbt`): its newest run.
        named = Path(ref)
        parent = named.parent if named.is_absolute() else Path(storage) / named.parent
        newest = newest_population(parent, named.name) if named.name else None
        if newest is not None:
            candidates.append(newest)
    for path in candidates:
        if (path / RESOLVED_FILE).is_file():
            if not (path / "tuner.pkl").is_file():
                raise ExperimentError.single(
                    str(path),
                    "",
                    "this results folder holds no Tune state (tuner.pkl): the run stopped "
                    "before it started; start it again with `workbench run`",
                )
            population_statuses(path)  # a damaged state is told now, not by Tune
            return path.resolve()
    tried = ", ".join(str(p) for p in candidates)
    raise ExperimentError.single(
        ref,
        "",
        f"no population to resume: none of {tried} holds a {RESOLVED_FILE} "
        "(give the results folder of a `workbench run`, or its experiment name)",
    )


def nothing_to_resume(results_dir: Path, name: str, *, restart_errored: bool) -> str | None:
    """Why `workbench resume` has nothing to do (every trial ended, no errored one to run
    again, and the search has no trial left to make), or None when there is something to
    resume."""
    statuses = population_statuses(results_dir)
    errored = [t for t, s in statuses.items() if s == "ERROR"]
    if (
        not statuses
        or not all(s in ("TERMINATED", "ERROR") for s in statuses.values())
        or (errored and restart_errored)
        or search_has_more(results_dir, len(statuses))
    ):
        return None
    return (
        f"Population {name} in {results_dir} has finished ({len(statuses)} trials, "
        f"{len(errored)} errored); nothing to resume."
        + (" --restart-errored runs the errored ones again." if errored else "")
    )
