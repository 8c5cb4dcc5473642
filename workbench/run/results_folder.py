"""A population's results folder: the saved experiment that names it, and what Tune's
last snapshot says of its trials. Light (no Ray, no RLlib), so the CLI can find a folder,
or say there is none, before it imports anything heavy."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.errors import ExperimentError
from workbench.names import RESOLVED_FILE


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


def find_results_dir(ref: str, storage: str = "results") -> Path:
    """A population's results folder from its path or its experiment name.

    Raises ExperimentError (exit 2) naming what was tried when there is nothing to resume.
    """
    # An absolute ref is the same path under any storage: try it once.
    candidates = list(dict.fromkeys([Path(ref), Path(storage) / ref]))
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
    """Why `workbench resume` has nothing to do (every trial ended, and no errored one to
    run again), or None when there is something to resume."""
    statuses = population_statuses(results_dir)
    errored = [t for t, s in statuses.items() if s == "ERROR"]
    if (
        not statuses
        or not all(s in ("TERMINATED", "ERROR") for s in statuses.values())
        or (errored and restart_errored)
    ):
        return None
    return (
        f"Population {name} in {results_dir} has finished ({len(statuses)} trials, "
        f"{len(errored)} errored); nothing to resume."
        + (" --restart-errored runs the errored ones again." if errored else "")
    )
