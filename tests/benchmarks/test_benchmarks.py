"""The benchmark scripts still run (a tiny budget: this checks they work, not their figures;
the experiments their arms build, without running them: tests/unit/test_benchmark_arms.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.plan.population import MEASURED

ROOT = Path(__file__).resolve().parents[2]


def _benchmark(
    script: str, *args: str, cwd: Path | None = None, timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    """``benchmarks/<script> args`` run as a user runs it; it must succeed."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_env_throughput_runs_and_reports_every_case(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = _benchmark(
        "env_throughput.py",
        *("--rounds", "2", "--seconds", "0.02", "--sizes", "1,16"),
        *("--cases", "sim_view,sim_copy,sim_core,gym_vector,gym_single"),
        *("--json", str(out)),
        timeout=300,
    )
    assert "gymnasium numpy-vectorized" in result.stdout
    figures = json.loads(out.read_text())
    assert figures, "no figures written"
    text = json.dumps(figures)
    for case in ("sim_view", "sim_copy", "sim_core", "gym_vector", "gym_single"):
        assert case in text


def test_env_throughput_measures_the_mountain_cars_against_gymnasiums_sync_vector_env() -> None:
    # Gymnasium has no numpy-vectorized MountainCar: its baseline is a SyncVectorEnv, and the
    # continuous car's actions are float batches of the Box's shape.
    for env in ("MountainCar-v0", "MountainCarContinuous-v0"):
        result = _benchmark(
            "env_throughput.py",
            *("--env", env, "--rounds", "1", "--seconds", "0.02", "--sizes", "1,4"),
            *("--cases", "sim_view,sim_copy,sim_core,gym_vector,gym_single"),
            timeout=300,
        )
        assert f"env={env}" in result.stdout
        assert result.stdout.count("gymnasium SyncVectorEnv") == 2
        assert f"n/a (targets are for CartPole-v1; this is {env})" in result.stdout


def test_mlflow_overhead_runs_and_reports_both_callbacks(tmp_path: Path) -> None:
    result = _benchmark(
        "mlflow_overhead.py",
        *("--synthetic", "--rounds", "1", "--results", "20", "--results-ray", "2"),
        cwd=tmp_path,  # whatever MLflow might write next to the working directory lands here
        timeout=300,
    )
    rows = {
        cells[0]: cells[1:]
        for line in result.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| case")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    ray = rows["Ray MLflowLoggerCallback"]
    workbench = rows["workbench end to end (to flush)"]
    assert ray[0] == "2" and workbench[0] == "20"  # results per round
    for row in (ray, workbench, rows["workbench on_trial_result (enqueue)"]):
        median_ms, calls_per_result = float(row[1]), float(row[4])
        assert median_ms > 0 and calls_per_result > 0
    assert re.search(r"^(PASS|FAIL): workbench end to end [\d.]+ ms/result", result.stdout, re.M)
    assert list(tmp_path.iterdir()) == []


def _table_rows(stdout: str) -> dict[str, list[str]]:
    """Markdown table rows by their first cell."""
    return {
        cells[0]: cells[1:]
        for line in stdout.splitlines()
        if line.startswith("| ") and not line.startswith("|--")
        for cells in [[c.strip() for c in line.strip().strip("|").split("|")]]
    }


def test_tune_overhead_runs_and_reports_both_setups(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = _benchmark("tune_overhead.py", "--quick", "--json", str(out), cwd=tmp_path)
    rows = _table_rows(result.stdout)
    for label in (
        "train() (the anchor)",
        "exploit, new actor (Tune default)",
        "exploit, reused actor (workbench)",
        "workbench",
    ):
        assert label in rows, sorted(rows)
    assert "Tune defaults" in rows and "workbench with Tune's snapshot encoding" in rows
    assert "Tune's snapshot encoding less the workbench's, per round:" in result.stdout
    figures = json.loads(out.read_text())
    assert set(figures["populations"]) == {
        "workbench",
        "Tune defaults",
        "workbench with Tune's snapshot encoding",
    }
    for runs in figures["populations"].values():
        # 2 trials x 2 iterations; a clone of a donor already at the stop reports none
        assert 2 <= runs[0]["iterations"] <= 4
        assert runs[0]["train_s"] > 0 and 0 <= runs[0]["outside"] < 1
        assert runs[0]["driver_ms"] > 0
    assert all(ms > 0 for ms in figures["exploits"]["new_actor"])
    assert all(ms > 0 for ms in figures["exploits"]["reset"])  # reset() returned True


def test_time_to_target_runs_scheduler_arms(tmp_path: Path) -> None:
    # PB2, whose experiment is not a file as it stands (the derived numeric space); the
    # other arms' experiments are built without running in tests/unit/test_benchmark_arms.py,
    # and random search runs end to end in the shoot-out's reports.
    result = _benchmark("time_to_target.py", *("--quick", "--arms", "pb2"), cwd=tmp_path)
    rows = [line for line in result.stdout.splitlines() if line.startswith("| 0 |")]
    assert [row.split("|")[2].strip() for row in rows] == ["pb2"]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == "0"  # exit status
        assert cells[3] == "2"  # trials read back
        assert float(cells[7].replace(",", "")) > 0  # the population sampled
    assert "| arm | reached |" in result.stdout


def test_end_to_end_runs_every_arm_and_the_learning_race(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = _benchmark(
        "end_to_end.py",
        *("--rounds", "2", "--iterations", "1", "--batch", "256", "--seeds", "0"),
        *("--target", "30", "--max-steps", "3000", "--json", str(out)),
    )
    figures = json.loads(out.read_text())
    rows = {row["arm"]: row for row in figures["throughput"]}
    assert list(rows) == ["rllib_example", "rllib_example_sim_ext", "fast_runner_only", "workbench"]
    assert rows["rllib_example"]["vs_example"] == 1.0
    for row in rows.values():
        assert len(row["rounds"]) == 2 and all(r > 0 for r in row["rounds"])
        assert 0 < row["sampling_share"] < 1
    # The workbench arm is built by the workbench, with its small-env defaults.
    assert "defaults: small_env" in result.stderr
    learning = figures["learning"]
    assert [r["arm"] for r in learning] == ["rllib_example", "workbench"]
    assert all(r["seed"] == 0 and r["best"] > 0 for r in learning)
    assert "time to 30" in result.stdout


def _shootout(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The shoot-out's --quick run of ASHA+Optuna with `args`; it must succeed."""
    return _benchmark("scheduler_shootout.py", "--quick", "--arms", "asha_optuna", *args, cwd=cwd)


def test_scheduler_shootout_runs_every_arm_and_draws_the_curve(tmp_path: Path) -> None:
    # One arm of the four, ASHA+Optuna: its searcher must cope with results that carry no
    # score yet, and its members stop early, so the table and the curve read uneven runs.
    # The other arms' experiments are built without running in
    # tests/unit/test_benchmark_arms.py; PBT and PB2 populations run in tests/integration.
    # On MountainCar, kept under --root so that a second sitting finds it done.
    png, root = tmp_path / "curve.png", tmp_path / "runs"
    result = _shootout(tmp_path, "--plot", str(png), "--root", str(root))
    rows = [line for line in result.stdout.splitlines() if line.startswith("| 0 |")]
    assert [row.split("|")[3].strip() for row in rows] == ["asha_optuna"]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == "development" and cells[3] == "0"  # seed set, exit status
        assert int(cells[4]) >= 2  # members read back
        # Env steps sampled: at most the budget (--quick: 2 x 4 iterations of 512) and
        # the iterations in flight when it ran out (stop.population_env_steps).
        assert 0 < float(cells[6].replace(",", "")) <= 4096 + 2 * 512
        # The population's result, chosen by the run, and the best short evaluation it
        # recorded; the result is never below it by more than the evaluations' noise
        # (2 short episodes against 5 confirming ones on MountainCar: tens of points).
        result_value, best_short = float(cells[7]), float(cells[9])
        assert -1000 < result_value < 200 and -1000 < best_short < 200
        assert result_value >= best_short - 100
        assert -1000 < float(cells[10]) < 200  # the members' final median
        assert float(cells[11].replace(",", "")) > 0  # the evaluations' env steps
    assert "| arm | runs | result: median |" in result.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in root.glob("*.measure.json")) == ["asha_optuna-seed0.measure.json"]

    # A second sitting runs nothing again; re-measuring reads the kept runs the same way.
    again = _shootout(tmp_path, "--root", str(root))
    assert again.stdout.count("done in an earlier sitting") == 1
    assert [line for line in again.stdout.splitlines() if line.startswith("| 0 |")] == rows
    measured = _shootout(tmp_path, "--measure-again", str(root))
    assert "measured again from" in measured.stdout
    remeasured = [line for line in measured.stdout.splitlines() if line.startswith("| 0 |")]
    assert [r.split("|")[7:10] for r in remeasured] == [r.split("|")[7:10] for r in rows]


def test_population_throughput_reports_the_parts_the_workbench_and_tune_rllib(
    tmp_path: Path,
) -> None:
    # MountainCar (sim_ext: no box2d needed), 2 trials x 2 iterations; SB3 needs RL Zoo's
    # virtualenv, which the test points at a missing path to see the arm skipped aloud.
    out = tmp_path / "figures.json"
    result = _benchmark(
        "population_throughput.py",
        *("--quick", "--task", "mountaincar", "--json", str(out)),
        *("--zoo-python", str(tmp_path / "no-zoo" / "python")),
        cwd=tmp_path,
    )
    assert "sb3 arm skipped: no " in result.stdout
    rows = _table_rows(result.stdout)
    for label in ("workbench", "Tune + RLlib defaults", "env alone, one core"):
        assert label in rows, sorted(rows)
    assert "workbench iterations (workbench diagnose" in result.stdout
    runs = json.loads(out.read_text())["mountaincar/2"]
    assert set(runs) == {"parts", "workbench", "rllib"}
    parts = runs["parts"][0]
    assert parts["learner"] == "LeanPPOTorchLearner" and parts["batch"] == 2048
    assert parts["ceiling"] > 0 and parts["env_rate"] > parts["ceiling"] / 2
    # 2 trials x 2 iterations; RLlib's runner may finish a sample a few steps past the batch.
    assert runs["workbench"][0]["env_steps"] == 2 * 2 * 2048
    assert 2 * 2 * 2048 <= runs["rllib"][0]["env_steps"] <= 2 * 2 * (2048 + 64)
    for arm in ("workbench", "rllib"):
        figures = runs[arm][0]
        assert 0 < figures["outside"] < 1 and figures["rate"] > 0
        # Outside train(), in three parts that add up to it; the trials' processes start
        # before their first result, which is most of it on a run this short.
        pieces = [figures[f"outside_{p}"] for p in ("before", "between", "after")]
        assert sum(pieces) == pytest.approx(figures["outside"], abs=1e-6)
        assert pieces[0] > 0
    assert 0 < runs["workbench"][0]["learner"] < 1
    assert "workbench, outside train(): before the first result" in result.stdout


def test_population_scale_runs_a_population_on_a_local_cluster_and_stops_it(
    tmp_path: Path,
) -> None:
    # 4 trials x 2 iterations, sampling in their own process, on a cluster of 2 `ray start`
    # nodes (deploy/local_cluster.py).
    out = tmp_path / "figures.json"
    result = _benchmark("population_scale.py", *("--quick", "--json", str(out)), cwd=tmp_path)
    assert "processes of the cluster left running" not in result.stdout
    (row,) = json.loads(out.read_text())
    assert row["size"] == 4 and row["env_steps"] > 0 and 0 < row["outside"] < 1
    pieces = [row[f"outside_{p}"] for p in ("before", "between", "after")]
    assert sum(pieces) == pytest.approx(row["outside"], abs=1e-6)
    # Each trial's wait before its first train(), shortest first, adding up to the part
    # before the first results (Tune stamps results with whole seconds: 1 s a trial).
    waits = row["first_train_at_s"]
    assert len(waits) == 4 and waits == sorted(waits) and waits[0] > -1.0
    slot_s = 4 * row["wall_s"]
    assert sum(waits) / slot_s == pytest.approx(row["outside_before"], abs=1e-6)
    # And each one's time from its last result to the end, which add up to the part after.
    ends = row["last_result_to_end_s"]
    assert len(ends) == 4 and ends == sorted(ends) and ends[0] > -1.0
    assert sum(ends) / slot_s == pytest.approx(row["outside_after"], abs=1e-6)
    assert "after the last results: fit() ended" in result.stdout
    # Each trial process's CPU when its first train() began: its start among the others,
    # more than the bare interpreter's and within reach of the probe's process alone. A
    # process Tune handed on to a later trial (actor reuse) started once.
    starts = row["start_cpu_s"]
    assert 2 <= len(starts) <= 4 and starts == sorted(starts)
    assert all(0.5 < s < 5 * row["forecast"]["start_alone_s"] for s in starts), starts
    assert "a trial process's CPU when its first train() began:" in result.stdout
    # The checkpoint folders each trial held at once: 2 iterations at a checkpoint every 2
    # (and at the end) leave one or two, within checkpoint.keep.
    held = row["checkpoint_folders"]
    assert len(held["peaks"]) == 4 and all(1 <= p <= held["keep"] for p in held["peaks"]), held
    assert "checkpoint folders a trial held at once" in result.stdout
    # Every trial process was seen, with its memory, on one of the two nodes.
    assert row["trial_processes"] >= 4 and row["rss_median_mb"] > 50
    assert set(row["per_node"]) <= {"node_0", "node_1"}
    assert sum(row["per_node"].values()) == row["trial_processes"]
    assert "| 4 |" in result.stdout
    # Ray's placement groups read back: every bundle of the 4 trials on a node, as many
    # on each as the plan placed.
    place = row["placement"]
    assert place["ray_groups"] == 4 and sum(place["ray"].values()) == 4
    assert sum(place["planned"].values()) == 4 and set(place["ray"]) == {"node_0", "node_1"}
    assert place["same_counts"]
    # The plan's forecast beside the measurement.
    forecast = row["forecast"]
    assert forecast["results_per_s"] > 0 and 0 < forecast["outside"] < 1
    assert forecast["cores"] == min(4, os.cpu_count() or 1)
    # Priced at the population's own first draws, one a trial, for the calibration.
    assert len(forecast["drawn_costs"]) == 4 and all(c > 0 for c, _ in forecast["drawn_costs"])
    # A trial process's start, priced from the probe's fresh process started alone.
    assert forecast["start_alone_s"] > 0
    assert forecast["start_s"] == pytest.approx(
        forecast["start_alone_s"] * MEASURED.start_s / MEASURED.start_alone_s
    )
    assert "`workbench plan`'s forecast beside the measurement" in result.stdout
    assert "within 25% of the measured median:" in result.stdout
    # The CPU the cluster's processes used over the run: the trials' and Ray's own.
    assert row["trial_cpu_s"] > 0 and row["ray_cpu_s"] > 0
    # The benchmark's own sampling threads timed apart from the driver's work.
    assert 0 < row["watching_cpu_s"] < row["driver_cpu_s"] + row["watching_cpu_s"]
    assert "the benchmark's sampling threads beside it" in result.stdout
    assert row["nodes"] == 2 and row["round"] == 1


def test_snapshot_reads_times_every_reader_on_the_same_snapshots() -> None:
    result = _benchmark("snapshot_reads.py", "--quick", timeout=300)
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("| 4 |")]
    anchor, blake2b, ours = (float(cell.split()[0]) for cell in row.split("|")[3:6])
    assert anchor > 0 and blake2b > 0 and ours > 0


def test_snapshot_writes_times_tunes_save_the_workbenchs_and_the_sync() -> None:
    result = _benchmark("snapshot_writes.py", "--quick", timeout=300)
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("| 4 |")]
    tune, before, ours = (float(cell.split()[0]) for cell in row.split("|")[3:6])
    assert tune > 0 and before > 0 and ours > 0
    copy, link = (float(cell.split()[0]) for cell in row.split("|")[8:10])
    assert copy > 0 and link > 0


def test_cli_latency_times_every_command_against_mlflows_cli(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = _benchmark(
        "cli_latency.py",
        *("--rounds", "1", "--trials", "2", "--iterations", "3", "--json", str(out)),
    )
    seconds = json.loads(out.read_text())["seconds"]
    assert set(seconds) == {"--help", "runs", "show", "lineage", "validate", "mlflow runs list"}
    assert all(len(v) == 1 and v[0] > 0 for v in seconds.values())
    assert "(the anchor)" in result.stdout and "<= 1.5 s and <= half the anchor" in result.stdout


def test_snapshot_encoding_compares_tunes_encoding_with_the_workbenchs(tmp_path: Path) -> None:
    result = _benchmark(
        "snapshot_encoding.py",
        *("--rounds", "1", "--repeat", "3", "--iterations", "3", "--checkpoints", "1"),
        cwd=tmp_path,
    )
    rows = _table_rows(result.stdout)
    tune, workbench = rows["tune"], rows["workbench"]
    assert float(tune[0].split()[0]) > 0 and float(workbench[0].split()[0]) > 0
    # Every window's text lands in Ray's log_once set with Tune's encoding, none with ours.
    assert int(tune[3].split()[0]) > 0 and workbench[3] == "0 (0)"
