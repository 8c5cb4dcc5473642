"""benchmarks/learner_overhead.py and end_to_end.py's RL Zoo arms still run (a tiny budget:
this checks they work and report every arm, not their figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_learner_overhead_reports_every_arm_and_where_the_time_goes(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "learner_overhead.py"),
            *("--rounds", "1", "--networks", "small_env", "--minibatches", "256"),
            *("--dqn", "--quick", "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())
    arms = [row["arm"] for row in figures["ppo_updates"]]
    assert arms == ["rllib", "lean", "torch", "torch_fused"]
    assert all(row["per_update_ms"][0] > 0 for row in figures["ppo_updates"])
    assert [row["arm"] for row in figures["ppo_train"]] == ["rllib", "lean"]
    assert all(row["train_ms"][0] > 0 for row in figures["ppo_train"])
    # DQN: RLlib's learner, the lean DQN learner and plain torch, one update each.
    assert [row["arm"] for row in figures["dqn_updates"]] == ["rllib", "lean", "torch"]
    assert all(row["ms"][0] > 0 for row in figures["dqn_updates"])
    rows = dict((label, ms) for label, ms, _ in figures["profile_update"]["rows"])
    assert rows["forward_train"] > 0 and rows["metrics: log_value"] > 0
    assert "where RLlib's train() goes" in result.stdout


def test_end_to_end_races_the_workbench_and_rllibs_learner_on_rl_zoos_settings(
    tmp_path: Path,
) -> None:
    out = tmp_path / "figures.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "end_to_end.py"),
            *("--rounds", "0", "--seeds", "", "--zoo-seeds", "0"),
            *("--zoo-arms", "zoo_workbench,zoo_rllib_learner,workbench_fast"),
            *("--target", "30", "--max-steps", "5000", "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    zoo = json.loads(out.read_text())["zoo"]
    assert [r["arm"] for r in zoo] == ["zoo_workbench", "zoo_rllib_learner", "workbench_fast"]
    assert all(r["best"] > 0 for r in zoo)
    assert "block mean of 30" in result.stdout
