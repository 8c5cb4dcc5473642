"""The drills of ``benchmarks/population_scale.py``: a node lost while its trials train
(``--lose-node``), the driver killed and the population resumed (``--kill-driver``),
and what each must leave."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import read_trials
from benchmarks.scale_setup import planned, write_experiment
from benchmarks.scale_watch import Watch
from deploy.local_cluster import LocalCluster


class NodeLoss(Watch):
    """Kills the raylet of the cluster's last node once every trial of the population has
    ``after`` results (the drill of issue 29: a node lost while its trials train)."""

    def __init__(self, cluster: LocalCluster, results_dir: Path, size: int, after: int) -> None:
        self.cluster, self.results_dir, self.size, self.after = cluster, results_dir, size, after
        self.node = cluster.nodes[-1]
        self.killed_at: float | None = None
        super().__init__(self._watch)

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            counts = [
                len(f.read_text().splitlines()) for f in self.results_dir.glob("*/result.json")
            ]
            if len(counts) == self.size and min(counts) >= self.after:
                os.kill(self.cluster.raylet(self.node), signal.SIGKILL)
                self.killed_at = time.time()
                return


def drill_checks(resolved: Any, iterations: int) -> dict[str, Any]:
    """What the drill must leave: every trial at its stop rule, one MLflow run a trial,
    FINISHED, with no gap in its steps, and a lineage without a hole; and how many trials
    failed (their processes were on the lost node) and went on from a checkpoint."""
    from mlflow.tracking import MlflowClient

    from workbench.analysis.lineage import check_sequence, read_jsonl
    from workbench.names import LINEAGE_FILE, STORE_FILE

    trials = read_trials(resolved.results_dir)
    client = MlflowClient(f"sqlite:///{resolved.results_dir.parent / STORE_FILE}")
    experiment = client.get_experiment_by_name(resolved.experiment.name)
    runs = client.search_runs(
        [experiment.experiment_id], filter_string="tags.`workbench.role` = 'trial'"
    )
    gaps = []
    for run in runs:
        steps = sorted(
            m.step for m in client.get_metric_history(run.info.run_id, "training_iteration")
        )
        if steps != list(range(1, len(steps) + 1)):
            gaps.append(run.info.run_name)
    lineage = resolved.results_dir / LINEAGE_FILE
    records = read_jsonl(lineage) if lineage.exists() else []
    return {
        "finished": sum(rows[-1]["training_iteration"] == iterations for rows in trials.values()),
        "failed_and_restored": sum(int(r.data.tags.get("workbench.failures", 0)) > 0 for r in runs),
        "mlflow_runs": len(runs),
        "mlflow_finished": sum(r.info.status == "FINISHED" for r in runs),
        "mlflow_gaps": gaps,
        "lineage_records": len(records),
        "lineage_problems": check_sequence(records),
    }


def driver_drill(size: int, args: argparse.Namespace, cluster: LocalCluster, folder: Path) -> Any:
    """The killed-driver drill at this size: `workbench run --address` as its own process,
    SIGKILLed once every trial has reached a third of its iterations, then `workbench resume
    --address` on the same cluster; what the drill must leave (``drill_checks``), and how
    many trials went on from a checkpoint rather than from the start."""
    from workbench.experiment.resolve import load_and_resolve

    path = write_experiment(size, args, folder)
    resolved = load_and_resolve(path)
    planned(resolved, cluster.address, None)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": ""}
    workbench = str(Path(sys.executable).parent / "workbench")
    log = folder / f"drill{size}.log"
    after = args.iterations // 3
    started = time.monotonic()
    with log.open("w") as sink:
        driver = subprocess.Popen(
            [
                workbench,
                "run",
                str(path),
                "--name",
                resolved.experiment.name,
                "--address",
                cluster.address,
            ],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=path.parent,
        )
    try:
        while True:
            rows = read_trials(resolved.results_dir) if resolved.results_dir.is_dir() else {}
            # PBT's clones jump ahead: a trial's iteration, not its count of results.
            reached = [r[-1]["training_iteration"] for r in rows.values() if r]
            if len(reached) == size and min(reached) >= after:
                break
            if driver.poll() is not None:
                raise SystemExit(f"the driver ended before the kill: see {log}")
            time.sleep(0.5)
        killed_at = time.monotonic() - started
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    before = {name: len(r) for name, r in read_trials(resolved.results_dir).items()}
    resume_started = time.monotonic()
    resumed = subprocess.run(
        [workbench, "resume", str(resolved.results_dir), "--address", cluster.address],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=path.parent,
    )
    if resumed.returncode != 0:
        raise SystemExit(f"resume failed ({resumed.returncode}): {resumed.stderr[-2000:]}")
    trials = read_trials(resolved.results_dir)
    restored = sum(
        1
        for name, rows in trials.items()
        if before.get(name, 0) < args.iterations
        and len(rows) > before.get(name, 0)
        and rows[before[name]].get("iterations_since_restore") == 1
        and rows[before[name]]["training_iteration"] > 1
    )
    return {
        "size": size,
        "driver_drill": {
            "killed_s": killed_at,
            "results_at_kill": sum(before.values()),
            "resume_s": time.monotonic() - resume_started,
            "training_at_kill": sum(n < args.iterations for n in before.values()),
            "restored_from_checkpoint": restored,
            **drill_checks(resolved, args.iterations),
        },
    }
