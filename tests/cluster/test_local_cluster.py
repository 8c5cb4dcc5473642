"""`make cluster-up` / `make cluster-down` (deploy/local_cluster.py): four `ray start` nodes
on loopback that `workbench plan --address` reads as four nodes, and a `down` that leaves
no process of the cluster behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from deploy.local_cluster import LocalCluster, in_groups

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "deploy" / "local_cluster.py")
BIN = Path(sys.executable).parent


def _script(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=cwd,
    )


def test_four_nodes_come_up_are_planned_on_and_go_down(tmp_path: Path) -> None:
    up = _script("up", "--nodes", "4", "--cpus", "2,1,1,1", "--memory", "1.5", cwd=tmp_path)
    state = tmp_path / ".cluster" / "local_cluster.json"
    cluster = LocalCluster.load(state) if state.is_file() else None
    try:
        assert up.returncode == 0, up.stdout + up.stderr[-3000:]
        assert cluster is not None
        assert "Ray cluster up: 4 nodes, node_0 (2 CPU, 1.5 GB), node_1 (1 CPU, 1.5 GB)" in (
            up.stdout
        )
        # A second `up` over a live one is refused, and the first is untouched.
        again = _script("up", cwd=tmp_path)
        assert again.returncode == 2 and "a cluster is up already" in again.stderr

        planned = subprocess.run(
            [
                str(BIN / "workbench"),
                "plan",
                str(ROOT / "experiments" / "cartpole_pbt.yaml"),
                "--address",
                cluster.address,
                "--json",
            ],
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert planned.returncode == 0, planned.stderr[-3000:]
        nodes = json.loads(planned.stdout)["cluster"]["nodes"]
        by_name = {
            next(k for k in n["resources"] if k.startswith("node_")): n["resources"]["CPU"]
            for n in nodes
        }
        assert by_name == {"node_0": 2.0, "node_1": 1.0, "node_2": 1.0, "node_3": 1.0}
        assert [n["resources"]["memory"] for n in nodes] == [1.5 * 2**30] * 4
        _memory_is_checked_before_anything_starts(cluster, tmp_path)

        status = _script("status", cwd=tmp_path)
        assert status.returncode == 0
        assert status.stdout.count("raylet pid") == 4, status.stdout
    finally:
        down = _script("down", cwd=tmp_path)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not state.exists()
    assert not in_groups(cluster.groups()), "processes of the cluster left running"
    assert not Path(cluster.temp_dir).exists()


def _memory_is_checked_before_anything_starts(cluster: LocalCluster, tmp_path: Path) -> None:
    """By CPU the cluster holds 10 trials of half a CPU; by the memory its nodes declare
    (1.5 GB, 0.5 GB a trial process) 3 on the head and 2 on each worker: 9. `plan` and
    `run` both refuse 10 and name the fix; `run` leaves no results folder."""
    experiment = ROOT / "experiments" / "cartpole_pbt.yaml"
    results = tmp_path / "results"
    for command in ("plan", "run"):
        done = subprocess.run(
            [
                str(BIN / "workbench"),
                command,
                str(experiment),
                "--address",
                cluster.address,
                "--set",
                "population=10",
                "--set",
                f"storage={results}",
            ],
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            cwd=tmp_path,
        )
        assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
        assert f"{experiment}: population: 10 trials would train at once" in done.stderr
        assert "which holds 9 at once" in done.stderr
        assert "set max_concurrent: 9" in done.stderr
    assert not results.exists()


def test_bad_cpus_are_refused_before_anything_starts(tmp_path: Path) -> None:
    done = _script("up", "--nodes", "4", "--cpus", "1,1", cwd=tmp_path)
    assert done.returncode == 2
    assert "--cpus '1,1': one figure, or one a node (4, the head first)" in done.stderr
    assert not (tmp_path / ".cluster").exists()
    done = _script("up", "--nodes", "2", "--memory", "4,0", cwd=tmp_path)
    assert done.returncode == 2
    assert "--memory '4,0': GB, one figure, or one a node (2, the head first)" in done.stderr
    assert not (tmp_path / ".cluster").exists()
