"""Bottleneck diagnosis: the time split of an iteration, the verdict, the arithmetic.

Results are built with RLlib's own EMA class (`EmaStats`, the one behind every
``timers/*`` value) fed known durations, so the tests show that the split recovers each
iteration's seconds exactly, where a plain EMA / time_this_iter_s would not. Real
populations and `workbench diagnose` on them: tests/integration/test_diagnosis_integration.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from ray.rllib.algorithms.appo import APPOConfig
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.utils.metrics.stats.ema import EmaStats

from tests.support.experiments import tiny_ppo, write_experiment
from tests.support.stores import seed_store
from tests.support.trials import FakeTrial as TuneTrial
from workbench.analysis.diagnosis import diagnose
from workbench.cli import main
from workbench.trial import time_split
from workbench.trial.callbacks import WorkbenchCallbacks
from workbench.trial.time_split import TimeSplit, TrialFacts, iteration_split, recover_timer

SYNC = TrialFacts(asynchronous=False, env_runners=0)


class FakeTrial:
    """RLlib's bookkeeping of one trial: EMA timers and lifetime counters, as its
    MetricsLogger keeps them, turned into flattened results."""

    def __init__(self, facts: TrialFacts = SYNC) -> None:
        self.facts = facts
        self.timers: dict[str, EmaStats] = {}
        self.counters: dict[str, float] = {}

    def push(self, key: str, seconds: float) -> None:
        self.timers.setdefault(key, EmaStats()).push(seconds)

    def count(self, key: str, steps: float) -> None:
        self.counters[key] = self.counters.get(key, 0.0) + steps

    def peek(self, key: tuple[str, ...], default: float = math.nan) -> float:
        """MetricsLogger.peek, for the callback's snapshot."""
        joined = "/".join(key)
        if joined in self.timers:
            return float(self.timers[joined].peek())
        return self.counters.get(joined, default)

    def iteration(
        self,
        sampling: float,
        learner: float,
        sync: float,
        rest: float = 0.0,
        steps: int = 1000,
        calls: int = 1,
        **extra: float,
    ) -> dict[str, Any]:
        """One train() with these seconds (split evenly over `calls` training steps)."""
        sample_key = time_split.ASYNC_SAMPLE_TIMER if self.facts.asynchronous else None
        for _ in range(calls):
            self.push(sample_key or time_split.SAMPLING_TIMER, sampling / calls)
            self.push(time_split.LEARNER_TIMER, learner / calls)
            self.push(time_split.SYNC_TIMER, sync / calls)
        self.count(time_split.SAMPLED, steps)
        flat: dict[str, Any] = {
            time_split.ITERATION: sampling + learner + sync + rest,
            time_split.CALLS: calls,
            **{k: float(s.peek()) for k, s in self.timers.items()},
            **self.counters,
            **extra,
        }
        return flat


def run_iterations(trial: FakeTrial, rows: list[dict[str, float]]) -> list[TimeSplit]:
    """Each row through the split, the previous result's snapshot as 'before'."""
    before: dict[str, float] = {}
    out = []
    for row in rows:
        flat = trial.iteration(**row)
        out.append(iteration_split(flat, before, trial.facts))
        before = {**before, **time_split.snapshot(flat)}
    return out


# --- recovering seconds from RLlib's EMA timers ------------------------------------------------


def test_recovering_rllibs_ema_gives_each_iterations_own_seconds() -> None:
    durations = [9.0, 0.5, 0.7, 0.4, 2.5, 0.6]  # a slow first iteration, then fast ones
    ema = EmaStats()
    before = math.nan
    for seconds in durations:
        ema.push(seconds)
        now = float(ema.peek())
        recovered, exact = recover_timer(now, before, calls=1)
        assert recovered == pytest.approx(seconds, rel=1e-9) and exact
        before = now
    # The trap the recovery avoids: after the slow start the EMA is still about 9 s
    # while the last iteration took 0.6 s (an "EMA / time_this_iter_s" of 14).
    assert float(ema.peek()) / durations[-1] > 10


def test_several_training_steps_per_iteration_recover_their_sum() -> None:
    ema = EmaStats()
    ema.push(1.0)
    before = float(ema.peek())
    for _ in range(4):  # four training_step calls of 0.25 s in one iteration
        ema.push(0.25)
    recovered, exact = recover_timer(float(ema.peek()), before, calls=4)
    assert recovered == pytest.approx(1.0, rel=1e-9)
    assert not exact  # exact only when the calls were equal, which it cannot know
    steady = float(ema.peek())  # a call as long as the average leaves the EMA as it was
    assert recover_timer(steady, steady, calls=1) == (pytest.approx(steady), True)
    assert recover_timer(math.nan, before, calls=1) == (0.0, True)  # timer never ran


def test_a_restored_checkpoint_continues_from_the_donors_ema() -> None:
    donor = FakeTrial()
    rows = [{"sampling": s, "learner": 0.3, "sync": 0.01} for s in (2.0, 0.5, 0.6)]
    run_iterations(donor, rows)
    # The clone's MetricsLogger holds the donor's EMAs (RLlib checkpoints them); the
    # callback reads them in on_checkpoint_loaded, like this:
    restored = {
        key: donor.peek(tuple(key.split("/")))
        for key in time_split.TRACKED
        if not math.isnan(donor.peek(tuple(key.split("/"))))
    }
    flat = donor.iteration(sampling=0.8, learner=0.25, sync=0.01)
    split = iteration_split(flat, restored, SYNC)
    assert split.sampling_s == pytest.approx(0.8) and split.learner_s == pytest.approx(0.25)
    assert split.env_steps_sampled == 1000 and split.exact_iterations == 1


# --- verdicts and their arithmetic -------------------------------------------------------------


def test_sampling_bound_recommends_runners_with_the_arithmetic() -> None:
    (split,) = run_iterations(FakeTrial(), [{"sampling": 0.75, "learner": 0.2, "sync": 0.05}])
    assert split.verdict == "sampling-bound"
    assert split.sampling_fraction == pytest.approx(0.75)
    assert split.sampled_per_s_per_runner == pytest.approx(1000 / 0.75)  # one sampler
    assert split.trained_per_s == pytest.approx(1000 / 0.2)  # the learner's consumption
    assert split.runners_needed == pytest.approx(3.75)  # 5000 / 1333.3
    assert split.serial_fraction == pytest.approx(0.25)
    assert split.amdahl_max_speedup == pytest.approx(4.0)
    assert split.speedup_with(4) == pytest.approx(1 / (0.25 + 0.75 / 4))
    text = "\n".join(diagnose("Trial PPO_00000", split).lines())
    assert "Trial PPO_00000: sampling-bound" in text
    assert "runners needed to keep the learner busy = 5,000 / 1,333 = 3.75: about 4" in text
    assert "2.29x faster" in text and "1 / 0.25 = 4.00x" in text


def test_remote_runners_divide_the_sampling_rate() -> None:
    trial = FakeTrial(TrialFacts(asynchronous=False, env_runners=4))
    (split,) = run_iterations(trial, [{"sampling": 0.5, "learner": 0.4, "sync": 0.1}])
    assert split.sampled_per_s_per_runner == pytest.approx(1000 / (0.5 * 4))
    assert split.runners_needed == pytest.approx(5.0)  # 4 runners x 0.5 s / 0.4 s
    assert split.verdict == "sampling-bound"
    assert split.speedup_with(5) == pytest.approx(1 / (0.5 + 0.5 * 4 / 5))


def test_learner_bound() -> None:
    (split,) = run_iterations(
        FakeTrial(), [{"sampling": 0.2, "learner": 0.7, "sync": 0.02, "rest": 0.08}]
    )
    assert split.verdict == "learner-bound"
    assert split.runners_needed == pytest.approx(0.2 / 0.7)
    assert split.amdahl_max_speedup == pytest.approx(1 / 0.8)
    text = "\n".join(diagnose("t", split).lines())
    assert "the learner is the limit" in text and "1 / 0.80 = 1.25x" in text


def test_sync_bound() -> None:
    (split,) = run_iterations(
        FakeTrial(), [{"sampling": 0.3, "learner": 0.3, "sync": 0.35, "rest": 0.05}]
    )
    assert split.verdict == "sync-bound"
    assert "weight sync takes 35%" in "\n".join(diagnose("t", split).lines())


def test_balanced_and_the_rest_outside_the_timers() -> None:
    (split,) = run_iterations(
        FakeTrial(), [{"sampling": 0.45, "learner": 0.45, "sync": 0.02, "rest": 0.08}]
    )
    assert split.verdict == "balanced"
    assert split.rest_fraction == pytest.approx(0.08)
    (idle,) = run_iterations(
        FakeTrial(), [{"sampling": 0.1, "learner": 0.2, "sync": 0.0, "rest": 0.7}]
    )
    assert idle.verdict == "balanced"
    assert "70% of the iteration is outside the three timers" in "\n".join(
        diagnose("t", idle).lines()
    )


def _async_iteration(trial: FakeTrial, update: float, wait: float, **counts: float) -> dict:
    trial.push(time_split.THREAD_UPDATE, update)
    trial.push(time_split.THREAD_WAIT, wait)
    for key, steps in counts.items():
        trial.count(key, steps)
    return trial.iteration(sampling=0.001, learner=0.001, sync=0.002, rest=0.996, steps=1000)


def test_async_learner_bound_reports_the_policy_lag() -> None:
    trial = FakeTrial(TrialFacts(asynchronous=True, env_runners=2))
    lag = "learners/default_policy/diff_num_grad_updates_vs_sampler_policy"
    splits = []
    before: dict[str, float] = {}
    for value in (5.0, 9.0):
        flat = _async_iteration(
            trial, update=0.5, wait=0.02, **{time_split.TRAINED: 900, time_split.DROPPED: 100}
        )
        flat[lag] = value
        splits.append(iteration_split(flat, before, trial.facts))
        before = {**before, **time_split.snapshot(flat)}
    split = time_split.total(splits)
    assert split.verdict == "learner-bound"
    assert split.learner_busy_fraction == pytest.approx(0.5 / 0.52)
    assert split.env_steps_dropped == 200
    assert split.policy_lag_updates == pytest.approx(7.0) and split.lag_updates_max == 9.0
    text = "\n".join(diagnose("t", split).lines())
    assert "policy lag: 7.00 gradient updates on average (max 9)" in text
    assert "200 env steps dropped" in text and "more runners only add policy lag" in text


def test_async_main_process_blocked_on_the_learner_is_learner_bound() -> None:
    """A local learner's queue is bounded: handing it a batch blocks while it works, so
    the main process's learner-update share is a floor on how busy it is, whatever its
    thread's lagging EMAs say."""
    trial = FakeTrial(TrialFacts(asynchronous=True, env_runners=1))
    trial.push(time_split.THREAD_UPDATE, 0.05)
    trial.push(time_split.THREAD_WAIT, 2.0)  # an old wait, still in the EMA
    trial.count(time_split.TRAINED, 2000)
    flat = trial.iteration(sampling=0.05, learner=0.92, sync=0.01, rest=0.02, steps=2000)
    split = iteration_split(flat, {}, trial.facts)
    assert split.learner_busy_fraction == pytest.approx(0.92)
    assert split.verdict == "learner-bound"
    # Saturated: it takes in 2000 / 0.92 env steps/s, one runner gives 2000/s.
    assert split.runners_needed == pytest.approx((2000 / 0.92) / 2000)


def test_async_sampling_bound_counts_the_runners_that_would_feed_the_learner() -> None:
    trial = FakeTrial(TrialFacts(asynchronous=True, env_runners=2))
    flat = _async_iteration(trial, update=0.1, wait=0.9, **{time_split.TRAINED: 1000})
    split = iteration_split(flat, {}, trial.facts)
    assert split.verdict == "sampling-bound"
    assert split.learner_busy_fraction == pytest.approx(0.1)
    # The learner takes 1000 steps in 0.1 s of work: 10,000/s; each of the 2 runners
    # samples 500/s over the 1 s iteration: 20 runners would keep it busy.
    assert split.trained_per_s == pytest.approx(10_000)
    assert split.sampled_per_s_per_runner == pytest.approx(500)
    assert split.runners_needed == pytest.approx(20)
    assert "= 10,000 / 500 = 20.00: about 20 (now 2)" in "\n".join(diagnose("t", split).lines())


def test_no_figures_is_unknown_not_a_guess() -> None:
    assert TimeSplit().verdict == "unknown"
    trial = FakeTrial(TrialFacts(asynchronous=True, env_runners=1))
    flat = trial.iteration(sampling=0.0, learner=0.0, sync=0.0, rest=1.0)
    assert iteration_split(flat, {}, trial.facts).verdict == "unknown"  # no learner timers
    assert diagnose("t", TimeSplit()).lines() == [
        "t: unknown (0 iterations)",
        "  no iteration with timing figures yet",
    ]


def test_a_trial_leaves_its_warm_up_out_and_a_population_sums_its_trials() -> None:
    a = run_iterations(FakeTrial(), [{"sampling": 5.0, "learner": 5.0, "sync": 0.0}] * 1)
    a += run_iterations(FakeTrial(), [{"sampling": 0.8, "learner": 0.2, "sync": 0.0}] * 3)
    used, left_out = time_split.steady(a)
    assert left_out == 1 and len(used) == 3
    b = run_iterations(FakeTrial(), [{"sampling": 0.1, "learner": 0.9, "sync": 0.0}] * 2)
    population = time_split.total([*used, *b])
    assert population.iterations == 5
    assert population.sampling_s == pytest.approx(3 * 0.8 + 2 * 0.1)
    assert population.sampling_fraction == pytest.approx(2.6 / 5.0)


def test_metrics_round_trip_through_their_mlflow_names() -> None:
    trial = FakeTrial(TrialFacts(asynchronous=False, env_runners=3))
    (split,) = run_iterations(trial, [{"sampling": 0.4, "learner": 0.5, "sync": 0.05}])
    back = TimeSplit.from_metrics(split.metrics())
    for name in ("sampling_s", "learner_s", "sync_s", "runner_s", "iteration_s"):
        assert getattr(back, name) == pytest.approx(getattr(split, name))
    assert back.env_runners == 3 and back.verdict == split.verdict
    assert split.metrics()["verdict"] == time_split.VERDICTS.index("learner-bound")


# --- the callback adds the split to every result -----------------------------------------------


class FakeAlgorithm:
    def __init__(self, config: Any, trial: FakeTrial) -> None:
        self.config = config
        self.metrics = trial


@pytest.mark.parametrize(("config", "asynchronous"), [(PPOConfig(), False), (APPOConfig(), True)])
def test_the_callback_adds_the_split_to_each_result(config: Any, asynchronous: bool) -> None:
    config.env_runners(num_env_runners=0)
    trial = FakeTrial(TrialFacts(asynchronous=asynchronous, env_runners=0))
    algorithm = FakeAlgorithm(config, trial)
    callbacks = WorkbenchCallbacks()
    callbacks.on_algorithm_init(algorithm=algorithm)
    seconds = []
    for sampling in (3.0, 0.4, 0.5):
        flat = trial.iteration(sampling=sampling, learner=0.3, sync=0.01)
        result: dict[str, Any] = {}
        for key, value in flat.items():  # back to RLlib's nesting
            *path, leaf = key.split("/")
            node = result
            for part in path:
                node = node.setdefault(part, {})
            node[leaf] = value
        callbacks.on_train_result(algorithm=algorithm, result=result)
        seconds.append(result["workbench"]["sampling_s"])
        assert result["workbench"]["asynchronous"] == float(asynchronous)
    assert seconds == pytest.approx([3.0, 0.4, 0.5])


# --- the PNG and the CLI -----------------------------------------------------------------------


def test_the_time_split_png(tmp_path: Path) -> None:
    from workbench.analysis.plots import _time_split_figure, time_split

    shares = {
        "PPO_00000": [(1.0, 0.7, 0.2, 0.05, 0.05), (2.0, 0.6, 0.3, 0.05, 0.05)],
        "PPO_00001": [(1.0, 0.1, 0.8, 0.05, 0.05)],
        "PPO_00002": [],
    }
    figure = _time_split_figure(shares, title="t", subtitles={"PPO_00000": "sampling-bound"})
    titles = [ax.get_title() for ax in figure.axes if ax.get_visible()]
    assert titles == ["PPO_00000: sampling-bound", "PPO_00001"]
    path = time_split(shares, tmp_path / "split.png", title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _store_with_a_population(tmp_path: Path) -> str:
    """A store written by the real tracker from results the callback completed."""
    from workbench.tracking.callback import MlflowTracker, TrackingTarget

    seed_store(tmp_path / "mlflow.db")
    target = TrackingTarget(
        uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
        experiment="exp",
        population="pop",
        key=str(tmp_path / "pop"),
        results_dir=tmp_path / "pop",
        artifact_root=tmp_path / "mlartifacts",
        hyperparameters={"lr": "lr"},
    )
    tracker = MlflowTracker(target)
    tracker.setup()
    trials = [TuneTrial(f"abc_{i:05d}", {"lr": 0.001}) for i in range(2)]
    shapes = [(0.75, 0.2), (0.1, 0.8)]  # PPO_00000 sampling-bound, PPO_00001 learner-bound
    for trial in trials:
        tracker.on_trial_start(0, trials, trial)
    for trial, (sampling, learner) in zip(trials, shapes, strict=True):
        fake = FakeTrial()
        algorithm = FakeAlgorithm(PPOConfig().env_runners(num_env_runners=0), fake)
        callbacks = WorkbenchCallbacks()
        callbacks.on_algorithm_init(algorithm=algorithm)
        for it in range(1, 5):
            flat = fake.iteration(sampling=sampling, learner=learner, sync=0.05)
            result = {"training_iteration": it, "timers": {}, "config": {"lr": 0.001}}
            result.update({k: v for k, v in flat.items() if "/" not in k})
            result["timers"] = {k.split("/")[1]: v for k, v in flat.items() if "timers/" in k}
            result["env_runners"] = {"num_env_steps_sampled_lifetime": 1000.0 * it}
            callbacks.on_train_result(algorithm=algorithm, result=result)
            tracker.on_trial_result(it, trials, trial, result)
    assert tracker.writer.flush(30)
    for trial in trials:
        trial.status = "TERMINATED"
        tracker.on_trial_complete(0, trials, trial)
    tracker.on_experiment_end(trials)
    return target.uri


def test_diagnose_reads_the_store_and_says_the_verdicts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = _store_with_a_population(tmp_path)
    png = tmp_path / "split.png"
    assert main(["diagnose", "pop", "--store", uri, "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "Trial PPO_00000: sampling-bound (3 iterations, the first left out (warm-up))" in out
    assert "Trial PPO_00001: learner-bound" in out
    assert "Population pop (2 trials together)" in out
    assert "-> add env runners: runners needed to keep the learner busy = 5,000 / 1,333" in out
    assert png.is_file()

    assert main(["diagnose", "PPO_00001", "--store", uri, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (trial,) = data["trials"]
    assert trial["label"] == "Trial PPO_00001" and trial["verdict"] == "learner-bound"
    assert trial["figures"]["learner_fraction"] == pytest.approx(0.8 / 0.95)
    assert data["population_diagnosis"] is None

    assert main(["diagnose", "nothing-like-it", "--store", uri]) == 2
    assert "is neither a results folder, a population" in capsys.readouterr().err


def test_timeline_says_when_nothing_is_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "results" / "pop"
    folder.mkdir(parents=True)
    (folder / "workbench_experiment.yaml").write_text("name: pop\n")
    args = ["diagnose", str(folder), "--timeline", str(tmp_path / "t.json")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--timeline: nothing is running: no ray_session.json here" in err

    dead = 2**22 + 12345  # above the default pid_max: never a live process
    (folder / "ray_session.json").write_text(
        json.dumps({"driver_pid": dead, "session_dir": str(tmp_path / "session")})
    )
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"the population's driver (pid {dead}) has exited" in err
    assert f"workbench resume {folder}" in err
    assert not (tmp_path / "t.json").exists()


def test_run_dashboard_without_its_packages_says_how_to_get_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from workbench.run.ray_session import dashboard_missing

    missing = dashboard_missing()
    if missing is None:
        pytest.skip("ray[default] is installed here: the dashboard would start")
    data = tiny_ppo(
        tmp_path,
        name="x",
        search_space={"params": {"lr": {"loguniform": [1e-4, 1e-3]}}},
        stop={"iterations": 1},
    )
    experiment = write_experiment(tmp_path / "x.yaml", data, sort_keys=True)
    assert main(["run", str(experiment), "--dashboard"]) == 2
    err = capsys.readouterr().err
    assert "--dashboard: Ray's dashboard needs the packages of ray[default]" in err
    assert "pip install -e '.[dashboard]'" in err
    assert not (tmp_path / "results").exists()  # refused before anything started


def test_a_short_evaluation_is_not_part_of_the_iterations_shares() -> None:
    """A member's short evaluation (evaluation.every) runs inside the iteration Tune times;
    it is not sampling, learning or the rest of training, and a diagnosis that counted it
    as the rest called a sampling-bound trial balanced."""
    trial = FakeTrial()
    flat = trial.iteration(sampling=0.9, learner=0.1, sync=0.0)
    plain = iteration_split(flat, {}, SYNC)
    evaluated = dict(flat)
    evaluated[time_split.ITERATION] += 3.0
    evaluated[time_split.EVALUATION_TIME] = 3.0
    split = iteration_split(evaluated, {}, SYNC)
    assert split.evaluation_s == 3.0
    assert split.iteration_s == pytest.approx(plain.iteration_s)
    assert split.sampling_fraction == pytest.approx(plain.sampling_fraction)
    assert split.verdict == plain.verdict == "sampling-bound"
    back = TimeSplit.from_metrics(split.metrics())
    assert (back.evaluation_s, back.iteration_s) == (3.0, pytest.approx(1.0))
