"""Crash-safe resume and fault tolerance, with real failures: a SIGKILLed driver, a
simulator that raises, a worker process that dies."""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from tests.support.experiments import small_pbt, write_experiment
from tests.support.results import count_results, result_rows, rows_as_ray_reads_them
from workbench.analysis.lineage import check_sequence, read_jsonl
from workbench.names import LINEAGE_FILE, ROLE_TAG, STEP_METRIC
from workbench.trial.candidates import evaluations, kept, read_result
from workbench.trial.manifest import problem

WORKBENCH = str(Path(sys.executable).parent / "workbench")


ITERATIONS = 30


def _experiment(tmp_path: Path, **fields: Any) -> Path:
    space = {"params": {"lr": {"loguniform": [1e-5, 1e-2]}}}
    population = {"search_space": space, "population": 2, "stop": {"iterations": 14}}
    data = small_pbt(tmp_path, **{**population, **fields})
    return write_experiment(tmp_path, data, sort_keys=True)


def _snapshot_checkpoints(results_dir: Path) -> dict[str, tuple[int, float]]:
    """Trial name -> (the iteration of the checkpoint Tune's last snapshot would restore,
    the lr the trial had then: PBT's, if it exploited)."""
    import ray.cloudpickle as cloudpickle

    snapshot = sorted(results_dir.glob("experiment_state-*.json"))[-1]
    out = {}
    for trial_json, runtime_json in json.loads(snapshot.read_text())["trial_data"]:
        trial, runtime = json.loads(trial_json), json.loads(runtime_json)
        if trial["status"] == "TERMINATED":
            continue
        manager = cloudpickle.loads(bytes.fromhex(runtime["checkpoint_manager"]["value"]))
        latest = manager._latest_checkpoint_result
        name = f"PPO_{trial['trial_id'].rsplit('_', 1)[1]}"
        lr = float(trial["config"]["lr"])
        if latest is None:
            out[name] = (0, lr)
            continue
        state = Path(latest.checkpoint.path) / "algorithm_state.pkl"
        if not state.is_file():
            # Tune saves its experiment state at intervals: the last save before the kill
            # can name a checkpoint the driver rotated away afterwards (checkpoint.keep).
            # Its trial restores from the newest intact one instead
            # (tests/integration/test_checkpoint_fallback.py); no exact expectation here.
            continue
        out[name] = (int(pickle.loads(state.read_bytes())["training_iteration"]), lr)
    return out


def _alive(pid: int) -> bool:
    """Running: a zombie (dead, waiting for a parent that may never reap it in a
    container without an init) is not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A driver in its own session (a SIGKILL reaches it alone), its output unbuffered
    into ``log`` so that what it printed before a kill is there."""
    with log.open("ab") as sink:
        return subprocess.Popen(
            [WORKBENCH, *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def _kill_when(
    driver: subprocess.Popen[bytes], ready: Callable[[], bool], then_s: float, what: str
) -> None:
    """SIGKILLs the driver alone (Ray's processes stay behind, as after a lost node or an
    OOM kill) ``then_s`` seconds after ``ready()`` holds."""
    try:
        deadline = time.monotonic() + 300
        while not ready():
            assert driver.poll() is None, f"the driver ended before {what}"
            assert time.monotonic() < deadline, f"no progress before {what}"
            time.sleep(0.2)
        time.sleep(then_s)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    except BaseException:
        os.killpg(driver.pid, signal.SIGKILL)
        raise


def test_a_killed_driver_resumes_with_nothing_lost(tmp_path: Path) -> None:
    """The driver SIGKILLed at random points, twice, and resumed each time. Each resume
    stops the Ray processes the killed driver left and nothing else, and goes on from the
    checkpoints the last snapshot names with the values PBT had given them; at the end the
    MLflow runs, the lineage, Tune's result rows and the kept candidates agree."""
    rng = random.Random(7)
    # PBT decides at every iteration: the one deciding has the newer, usually better
    # score, so exploits come by noise; 30 decisions each make one after a resume all but
    # certain. Iterations of 1000 env steps (about a second): with 256 (0.3 s) an
    # exploited trial, restarting in a new process, came back 20 iterations behind the
    # other, which had finished or had no checkpoint the rules let it give; and the
    # population finished between two kills.
    experiment = _experiment(
        tmp_path,
        scheduler={"type": "pbt", "perturbation_interval": 1, "quantile_fraction": 0.5},
        training={"train_batch_size_per_learner": 1000, "minibatch_size": 250, "num_epochs": 2},
        stop={"iterations": ITERATIONS},
        # Short evaluations and kept candidates, cut by the kills too; the result chosen
        # at the end from what survived them.
        evaluation={"every": 2, "keep": 2, "episodes": 20},
    )
    results_dir = tmp_path / "results" / "pop"
    store = tmp_path / "results" / "mlflow.db"
    logs = [tmp_path / f"driver{n}.log" for n in range(3)]
    driver = _start(["run", str(experiment), "--name", "pop"], logs[0])

    def exploited_and_going() -> bool:
        counts = count_results(store)
        exploited = (results_dir / LINEAGE_FILE).exists()
        return len(counts) == 2 and min(counts.values()) >= 3 and exploited

    _kill_when(driver, exploited_and_going, rng.uniform(0.0, 1.5), "the first kill")
    session = json.loads((results_dir / "ray_session.json").read_text())
    leftovers = [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and session["session_dir"].encode() in _cmd(p)
    ]
    exploits_before = len(read_jsonl(results_dir / LINEAGE_FILE))
    # A process of someone else's that names the session's path (a `tail -f` on a Ray
    # log): the cleanup must leave it alone.
    log = str(Path(session["session_dir"]) / "logs" / "raylet.out")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", log])
    # Per kill: the checkpoint each trial goes on from and its rows before the resume.
    kills = [(_snapshot_checkpoints(results_dir), _row_counts(results_dir))]
    try:
        driver = _start(["resume", str(results_dir)], logs[1])
        # The second kill: more training than at the first, then a random moment more.
        seen = sum(count_results(store).values())

        def trained_on() -> bool:
            return sum(count_results(store).values()) >= seen + 2

        _kill_when(driver, trained_on, rng.uniform(0.0, 1.5), "the second kill")
        kills.append((_snapshot_checkpoints(results_dir), _row_counts(results_dir)))
        assert bystander.poll() is None, "the cleanup killed an unrelated process"
    finally:
        bystander.kill()
        bystander.wait()
    if leftovers:  # Ray's own processes outlive a SIGKILLed driver: the ones it recorded
        assert "left behind by the interrupted driver" in logs[1].read_text()
        assert not [pid for pid in leftovers if _alive(pid)]

    driver = _start(["resume", str(results_dir)], logs[2])
    try:
        code = driver.wait(timeout=600)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    out = logs[2].read_text()
    assert code == 0, out[-3000:] + _trial_errors(results_dir, out)

    rows = result_rows(results_dir)
    assert len(rows) == 2
    for name, trial_rows in rows.items():
        assert trial_rows[-1]["training_iteration"] == ITERATIONS, name  # its stop rule
    checked = 0
    # Each kill's rows, and where the session after it stopped: the next kill, or the end.
    ends = [before for _, before in kills[1:]] + [_row_counts(results_dir)]
    for n, ((restore_from, before), upto) in enumerate(zip(kills, ends, strict=True)):
        # Bounded loss: a trial the resume ran went on from the last checkpoint Tune had
        # completed, with the hyperparameters it had then (Tune alone resets a restored
        # trial to the values it was created with, undoing PBT's exploits).
        for name, (iteration, lr) in restore_from.items():
            if upto.get(name, 0) <= before.get(name, 0):
                continue  # no result in that session
            first = rows[name][before.get(name, 0)]
            assert first["training_iteration"] == iteration + 1, (n, name)
            assert first["config"]["lr"] == pytest.approx(lr), (n, name)
            checked += 1
    assert checked, kills  # the last resume runs every trial the kill left unfinished

    records = read_jsonl(results_dir / LINEAGE_FILE)
    assert check_sequence(records) == []
    assert len(records) > exploits_before, "PBT did not exploit after the resume"
    assert {r.target_name for r in records} | {r.source_name for r in records} <= set(rows)

    client = MlflowClient(f"sqlite:///{store}")
    exp = client.get_experiment_by_name("pop")
    runs = client.search_runs([exp.experiment_id])
    assert all(r.info.status == "FINISHED" for r in runs)
    parents = [r for r in runs if r.data.tags.get(ROLE_TAG) == "population"]
    trials = [r for r in runs if r.data.tags.get(ROLE_TAG) == "trial"]
    assert len(parents) == 1 and sorted(r.info.run_name for r in trials) == sorted(rows)
    for run in trials:
        history = client.get_metric_history(run.info.run_id, STEP_METRIC)
        steps = sorted(m.step for m in history)
        assert steps == list(range(1, len(steps) + 1)), run.info.run_name
        # Every result the store has is a row of Tune's result.json, in order: no row was
        # lost across the kills, the restores and PBT's exploits (the store, written from
        # a queue, may miss the results in flight at a SIGKILL; the rows may not).
        stored = [int(m.value) for m in sorted(history, key=lambda m: m.step)]
        kept_rows = iter(r["training_iteration"] for r in rows[run.info.run_name])
        assert all(any(k == v for k in kept_rows) for v in stored), run.info.run_name
        assert max(history, key=lambda m: m.step).value == ITERATIONS
    # Whole: each row on its own line (result_rows parsed every one), and Ray's own
    # reader reads every trial's rows, with no warning.
    by_ray, warnings = rows_as_ray_reads_them(results_dir)
    assert warnings == []
    assert by_ray == ends[-1]
    # The parent run carries the same lineage as the results folder.
    local = (results_dir / LINEAGE_FILE).read_text().splitlines()
    artifact = client.download_artifacts(parents[0].info.run_id, LINEAGE_FILE, str(tmp_path))
    assert sorted(map(json.loads, Path(artifact).read_text().splitlines()), key=str) == sorted(
        map(json.loads, local), key=str
    )
    # Each member's kept candidates are whole checkpoints, at most `keep`, each one of
    # its evaluations; the population's result is one of the policies that survived.
    for name in rows:
        candidates = kept(results_dir / name)
        assert 1 <= len(candidates) <= 2, name
        evaluated = {(e.iteration, e.return_mean) for e in evaluations(results_dir / name)}
        for folder, record in candidates:
            assert problem(folder) is None, folder
            assert (record.iteration, record.return_mean) in evaluated, folder
    result = read_result(results_dir)
    assert result is not None and result.trial_name in rows
    assert problem(result.checkpoint_path(results_dir)) is None


def _row_counts(results_dir: Path) -> dict[str, int]:
    return {name: len(r) for name, r in result_rows(results_dir).items()}


def _trial_errors(results_dir: Path, output: str) -> str:
    """The errors of the failed trials, from their folders or the paths the summary
    names (what a failed assertion needs)."""
    named = {Path(p) for p in re.findall(r"\(its error: (\S+)\)", output)}
    paths = sorted(named | set(results_dir.glob("*/error.txt")))
    return "".join(f"\n--- {p}\n{p.read_text()[-4000:]}" for p in paths if p.is_file())


def _cmd(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def test_resume_explains_a_missing_folder(tmp_path: Path) -> None:
    missing = subprocess.run(
        [WORKBENCH, "resume", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 2
    assert "no population to resume" in missing.stderr
    assert missing.stderr.count(str(tmp_path / "nowhere")) == 2  # the ref, the one folder tried


def test_a_crashed_worker_is_retried_and_a_failed_trial_is_recorded(tmp_path: Path) -> None:
    """One trial's process is SIGKILLed (retried from its checkpoint); in a second
    population one trial's simulator raises with no retries left (it fails, the
    other trial goes on)."""
    crash = _experiment(
        tmp_path,
        name="crash",
        scheduler={"type": "fifo"},
        population=2,
        stop={"iterations": 6},
        failure={"max_failures": 1},
        env={
            "id": "sim_ext/CartPole-v1",
            "config": {
                "crash_after_steps": 700,
                "fault_once_file": str(tmp_path / "crashed"),
            },
        },
    )
    done = subprocess.run(
        [WORKBENCH, "run", str(crash), "--name", "crash"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "crashed").exists(), "no worker crashed: the test checks nothing"
    rows = result_rows(tmp_path / "results" / "crash")
    assert all(r[-1]["training_iteration"] == 6 for r in rows.values())
    # The crashed trial went on from its checkpoint in a new process.
    restored = [
        name
        for name, r in rows.items()
        if any(row["iterations_since_restore"] < row["training_iteration"] for row in r)
    ]
    assert len(restored) == 1, rows.keys()
    # The failure is on the crashed trial's run, which went on to FINISHED.
    client = MlflowClient(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    crash_runs = {
        r.info.run_name: r
        for r in client.search_runs(
            [client.get_experiment_by_name("crash").experiment_id],
            filter_string="tags.`workbench.role` = 'trial'",
        )
    }
    assert crash_runs[restored[0]].data.tags.get("workbench.failures") == "1"
    assert all(r.info.status == "FINISHED" for r in crash_runs.values())

    fail = _experiment(
        tmp_path,
        name="fail",
        scheduler={"type": "fifo"},
        population=2,
        stop={"iterations": 6},
        failure={"max_failures": 0},
        env={
            "id": "sim_ext/CartPole-v1",
            "config": {"fault_after_steps": 700, "fault_once_file": str(tmp_path / "raised")},
        },
    )
    done = subprocess.run(
        [WORKBENCH, "run", str(fail), "--name", "fail"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Experiment fail: 2 trials, 1 errored" in done.stdout
    exp = client.get_experiment_by_name("fail")
    trials = client.search_runs(
        [exp.experiment_id], filter_string="tags.`workbench.role` = 'trial'"
    )
    statuses = sorted(r.info.status for r in trials)
    assert statuses == ["FAILED", "FINISHED"]
    failed = next(r for r in trials if r.info.status == "FAILED")
    assert "injected fault" in failed.data.tags["workbench.error"]

    # The errored trial, restarted from scratch (the fault fired once), completes
    # in the same run.
    resumed = subprocess.run(
        [WORKBENCH, "resume", str(tmp_path / "results" / "fail"), "--restart-errored"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    rows = result_rows(tmp_path / "results" / "fail")
    assert all(r[-1]["training_iteration"] == 6 for r in rows.values()), rows.keys()
    again = client.search_runs([exp.experiment_id], filter_string="tags.`workbench.role` = 'trial'")
    assert sorted(r.info.run_id for r in again) == sorted(r.info.run_id for r in trials)
    assert all(r.info.status == "FINISHED" for r in again)
    rerun = next(r for r in again if r.info.run_id == failed.info.run_id)
    history = client.get_metric_history(rerun.info.run_id, "training_iteration")
    assert max(m.value for m in history) == 6
