"""A population's results folder: the saved experiment that names it, and what Tune's
last snapshot says of its trials. Light (no Ray, no RLlib), so the CLI can find a folder,
or say there is none, before it imports anything heavy."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.errors import ExperimentError
from workbench.names import RESOLVED_FILE


def population_statuses(results_dir: Path) -> dict[str, str]:
    """Trial id -> Tune status, from the newest experiment-state snapshot ({} if none)."""
    snapshots = sorted(results_dir.glob("experiment_state-*.json"))
    if not snapshots:
        return {}
    data = json.loads(snapshots[-1].read_text())
    out: dict[str, str] = {}
    for trial_json, _runtime in data.get("trial_data", []):
        trial = json.loads(trial_json)
        out[str(trial.get("trial_id"))] = str(trial.get("status"))
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
            return path.resolve()
    tried = ", ".join(str(p) for p in candidates)
    raise ExperimentError.single(
        ref,
        "",
        f"no population to resume: none of {tried} holds a {RESOLVED_FILE} "
        "(give the results folder of a `workbench run`, or its experiment name)",
    )
