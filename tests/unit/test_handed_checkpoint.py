"""The policy a trial holds at its end: a PBT member exploited as the run ended holds the
donor checkpoint it was handed, not the newest checkpoint of its own folder.

Found in a LunarLander shoot-out: a member restarted from the best member's iteration-8
checkpoint when the population's env-step budget ran out, and was evaluated on its own
iteration-4 policy. The lineage tells the two apart: the tracker writes an exploit the
target never reported after with ``restored_iteration: null``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from workbench.names import LINEAGE_FILE
from workbench.policy.checkpoint import (
    MODULE_DIR,
    final_checkpoint,
    find_checkpoint,
    handed_checkpoint,
)
from workbench.policy.locate import locate
from workbench.trial.manifest import MANIFEST_FILE, write_manifest

EXPLOIT_TIME = 1_000_000.0  # when the last exploit was decided (epoch seconds)


def _checkpoint(trial: Path, index: int, iteration: int, written: float) -> Path:
    """A checkpoint-shaped folder of ``trial`` saved at ``iteration`` at time ``written``."""
    folder = trial / f"checkpoint_{index:06d}"
    (folder / MODULE_DIR).mkdir(parents=True)
    (folder / MODULE_DIR / "module_state.pkl").write_bytes(b"weights %d" % iteration)
    (folder / "learner_group" / "class_and_ctor_args.pkl").write_bytes(b"config")
    write_manifest(folder, policy={"training_iteration": iteration})
    os.utime(folder / MANIFEST_FILE, (written, written))
    return folder


def _exploit(
    seq: int, target: str, source: str, checkpoint: int, restored: int | None, time: float
) -> dict[str, Any]:
    return {
        "seq": seq,
        "time": time,
        "target": f"id_{target}",
        "target_name": target,
        "source": f"id_{source}",
        "source_name": source,
        "target_iteration": 7,
        "source_iteration": checkpoint,
        "exploit_iteration": 8,
        "checkpoint_iteration": checkpoint,
        "restored_iteration": restored,
        "step": 8,
    }


@pytest.fixture
def population(tmp_path: Path) -> Path:
    """PPO_00001 restarted from PPO_00002's iteration 4 (and trained to 8), then was handed
    PPO_00003's iteration-8 checkpoint as the run ended. PPO_00003 saved iteration 4, 8
    and 12; after an exploit of its own (at a later time) it saved iteration 8 again."""
    results = tmp_path / "pop"
    one, two, three = (results / name for name in ("PPO_00001", "PPO_00002", "PPO_00003"))
    _checkpoint(one, 0, 4, EXPLOIT_TIME - 300)
    _checkpoint(two, 0, 4, EXPLOIT_TIME - 250)
    _checkpoint(three, 0, 4, EXPLOIT_TIME - 200)
    _checkpoint(three, 1, 8, EXPLOIT_TIME - 10)
    _checkpoint(three, 2, 12, EXPLOIT_TIME + 40)
    _checkpoint(three, 3, 8, EXPLOIT_TIME + 90)
    records = [
        _exploit(0, "PPO_00001", "PPO_00002", 4, 4, EXPLOIT_TIME - 100),
        _exploit(1, "PPO_00001", "PPO_00003", 8, None, EXPLOIT_TIME),
    ]
    (results / LINEAGE_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    return results


def test_a_member_exploited_as_the_run_ended_holds_the_donor_checkpoint(population: Path) -> None:
    one = population / "PPO_00001"
    handed = population / "PPO_00003" / "checkpoint_000001"  # iteration 8, before the exploit
    assert handed_checkpoint(one) == handed
    assert final_checkpoint(one) == handed
    assert find_checkpoint(one) == handed.resolve()
    # The donor and a member never exploited hold their own newest.
    assert final_checkpoint(population / "PPO_00003") == (
        population / "PPO_00003" / "checkpoint_000003"
    )
    assert handed_checkpoint(population / "PPO_00002") is None


def test_a_member_that_trained_after_its_last_exploit_holds_its_own(population: Path) -> None:
    lineage = population / LINEAGE_FILE
    records = [json.loads(line) for line in lineage.read_text().splitlines()]
    records[-1]["restored_iteration"] = 8  # it reported iteration 9 from the donor's 8
    lineage.write_text("".join(json.dumps(r) + "\n" for r in records))
    one = population / "PPO_00001"
    assert handed_checkpoint(one) is None
    assert final_checkpoint(one) == one / "checkpoint_000000"


def test_a_checkpoint_of_its_own_saved_after_the_exploit_wins(population: Path) -> None:
    one = population / "PPO_00001"
    newer = _checkpoint(one, 1, 9, EXPLOIT_TIME + 30)
    assert handed_checkpoint(one) is None
    assert final_checkpoint(one) == newer


def test_without_the_donor_checkpoint_the_member_keeps_its_own(population: Path) -> None:
    one = population / "PPO_00001"
    # Deleted by checkpoint.keep, or damaged: the policy cannot be read from it.
    (population / "PPO_00003" / "checkpoint_000001" / MODULE_DIR / "module_state.pkl").write_text(
        "damaged"
    )
    assert handed_checkpoint(one) is None
    assert final_checkpoint(one) == one / "checkpoint_000000"


def test_a_trial_folder_reference_is_labelled_and_stays_the_trials(population: Path) -> None:
    source = locate(str(population / "PPO_00001"))
    assert source.checkpoint == (population / "PPO_00003" / "checkpoint_000001").resolve()
    assert "handed to PPO_00001 by its last exploit" in source.label
