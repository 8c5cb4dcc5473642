"""The score in a real PBT population (tests/conftest.py's shared one): every result carries
it beside RLlib's per-iteration mean, every checkpoint carries the window, and an exploited
trial goes on with its donor's window."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.support.results import result_rows
from workbench.experiment.schema import ScoreSection
from workbench.trial.manifest import MANIFEST_FILE, read_manifest
from workbench.trial.score import SCORE_FILE

WINDOW = ScoreSection().window


def _windows(trial_dir: Path) -> dict[int, dict[str, Any]]:
    """The trial's checkpointed windows by the iteration they were saved at."""
    out = {}
    for checkpoint in trial_dir.glob("checkpoint_*"):
        if not (checkpoint / MANIFEST_FILE).is_file():
            continue
        manifest = read_manifest(checkpoint)
        assert manifest is not None and SCORE_FILE in manifest["files"]
        iteration = int(manifest["progress"]["training_iteration"])
        out[iteration] = json.loads((checkpoint / SCORE_FILE).read_text())
    return out


def test_every_result_has_the_score_and_an_exploit_carries_the_donor_s_window(
    pbt_population: SimpleNamespace,
) -> None:
    results_dir = pbt_population.resolved.results_dir
    rows = result_rows(results_dir)
    for name, trial_rows in rows.items():
        for row in trial_rows:
            score = row["score"]
            assert 0 < score["episodes"] <= WINDOW, (name, row["training_iteration"])
            assert "return_mean" in score and "return_std" in score
            assert "episode_return_mean" in row["env_runners"]  # the raw mean, beside it
            assert "workbench_episode_returns" not in row["env_runners"]
    names = {trial_rows[0]["trial_id"]: name for name, trial_rows in rows.items()}
    exploits = [
        json.loads(line) for line in (results_dir / "lineage.jsonl").read_text().splitlines()
    ]
    assert exploits
    checked = 0
    for exploit in exploits:
        target, source = names[exploit["target"]], names[exploit["source"]]
        donor = _windows(results_dir / source)
        mine = _windows(results_dir / target)
        # The donor's checkpoint the target restored (what its next result showed; not
        # source_iteration, which mirrors Tune's pbt_global.txt and reads the donor's
        # result before the one the decision was made on), and the target's next one.
        donor_iteration = exploit["restored_iteration"]
        assert donor_iteration == exploit["checkpoint_iteration"], exploit
        if donor_iteration not in donor or donor_iteration + 1 not in mine:
            continue  # pruned since (3 kept)
        before, after = donor[donor_iteration], mine[donor_iteration + 1]
        (row,) = [
            r
            for r in rows[target]
            if r["training_iteration"] == donor_iteration + 1
            and r["score"]["episodes"] == len(after["returns"])
        ][-1:]
        new = int(row["env_runners"]["num_episodes"])
        # The target counts on from the donor's window: its episodes plus this iteration's.
        assert after["total"] == before["total"] + new
        kept = len(after["returns"]) - new
        if kept > 0:
            assert after["returns"][:kept] == before["returns"][-kept:]
        checked += 1
    assert checked, "no exploit whose checkpoints were kept"
