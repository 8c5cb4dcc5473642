"""The benchmark scripts still run (a tiny budget: this checks they work, not their figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_env_throughput_runs_and_reports_every_case(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "env_throughput.py"),
            *("--rounds", "2", "--seconds", "0.02", "--sizes", "1,16"),
            *("--cases", "sim_view,sim_copy,sim_core,gym_vector,gym_single"),
            *("--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "gymnasium numpy-vectorized" in result.stdout
    figures = json.loads(out.read_text())
    assert figures, "no figures written"
    text = json.dumps(figures)
    for case in ("sim_view", "sim_copy", "sim_core", "gym_vector", "gym_single"):
        assert case in text
