"""The live view's rows, exploit lines, stop-rule bar and plain output, the end summary's
wall time and stop reason, and the libraries' logging kept off the console (no Ray)."""

from __future__ import annotations

import io
import logging
import logging.handlers
import pickle
import re
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from workbench.lineage_record import ExploitDecision
from workbench.names import LOG_FILE, RETURN_METRIC, SCORE_METRIC, trial_name
from workbench.run.console import LibraryLogs
from workbench.run.progress import ProgressTable, StopGoal, TrialRecord, clock, number
from workbench.run.summary import RunSummary, stop_reason


class _Trial(SimpleNamespace):
    def __str__(self) -> str:
        return trial_name(self)


def _trial(index: int, **config: Any) -> _Trial:
    return _Trial(
        trial_id=f"39e3e_{index:05d}", trainable_name="PPO", config=config, status="PENDING"
    )


def _result(iteration: int, ret: float, config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "training_iteration": iteration,
        "num_env_steps_sampled_lifetime": 256 * iteration,
        "env_runners": {"episode_return_mean": ret},
        "config": dict(config),
        **extra,
    }


def _table(**kwargs: Any) -> ProgressTable:
    goal = kwargs.pop("goal", StopGoal({"training_iteration": 6}, population=2))
    return ProgressTable({"lr": "lr", "lambda": "lambda_"}, goal=goal, **kwargs)


def test_one_row_per_trial_in_a_stable_order_with_the_users_names() -> None:
    table = _table()
    first, second = _trial(0, lr=1e-3, **{"lambda": 0.9}), _trial(1, lr=2e-3, **{"lambda": 0.95})
    # Tune reports in any order; the rows stay by name.
    table.on_trial_result(0, [], second, _result(1, 10.0, second.config))
    table.on_trial_result(0, [], first, _result(1, 12.0, first.config))
    table.on_trial_result(0, [], second, _result(2, 11.0, second.config))
    lines = table.table_lines()
    assert lines[0].split() == [
        "trial", "status", "iter", "env", "steps", "return", "best", "lr", "lambda_"
    ]  # fmt: skip
    assert [line.split()[0] for line in lines[1:]] == ["PPO_00000", "PPO_00001"]
    assert "39e3e" not in "\n".join(lines)
    assert lines[2].split()[:7] == ["PPO_00001", "RUNNING", "2", "512", "11", "11", "0.002"]


def test_the_schedule_numbers_the_first_iteration_trained_with_each_set_of_values() -> None:
    """As `workbench show` does (1, 3, 5), not the iteration before (0, 2, 4): PBT has
    changed the trial's config by the time the result that decided it reaches the table."""
    table = _table()
    trial = _trial(0, lr=1e-3, **{"lambda": 0.9})
    old = dict(trial.config)
    table.on_trial_result(0, [], trial, _result(1, 10.0, old))
    table.on_trial_result(0, [], trial, _result(2, 11.0, old))
    trial.config = {"lr": 5e-4, "lambda": 0.9}  # exploited at iteration 2
    table.on_trial_result(0, [], trial, _result(3, 12.0, trial.config))
    table.on_trial_result(0, [], trial, _result(4, 12.0, trial.config))
    new = dict(trial.config)
    trial.config = {"lr": 2e-4, "lambda": 0.95}  # decided on its own result 4
    table.on_trial_result(0, [], trial, _result(4, 12.0, new))
    table.on_trial_result(0, [], trial, _result(5, 13.0, trial.config))
    (record,) = table.records.values()
    assert [it for it, _ in record.schedule] == [1, 3, 5]
    assert record.schedule[1][1] == {"lr": 5e-4, "lambda_": 0.9}
    # The row shows the values the trial trains with next.
    assert record.hyperparameters == {"lr": 2e-4, "lambda_": 0.95}


def test_the_score_is_shown_when_trials_report_it_else_the_raw_mean() -> None:
    table = _table()
    trial = _trial(0, lr=1e-3, **{"lambda": 0.9})
    table.on_trial_result(0, [], trial, _result(1, 30.0, trial.config))
    assert table.table_lines()[0].split()[5] == "return"
    scored = _result(2, 50.0, trial.config, score={"return_mean": 41.5})
    table.on_trial_result(0, [], trial, scored)
    (record,) = table.records.values()
    assert record.return_metric == SCORE_METRIC and record.last_return == 41.5
    assert table.table_lines()[0].split()[5] == "score"


def _decision(
    target: str, source: str, exploit_iteration: int, old: dict[str, Any], new: dict[str, Any]
) -> ExploitDecision:
    return ExploitDecision(
        time=0.0,
        target=target,
        source=source,
        target_iteration=exploit_iteration,
        source_iteration=exploit_iteration,
        exploit_iteration=exploit_iteration,
        decided_on_own_result=True,
        old=old,
        new=new,
    )


def test_an_exploit_is_one_line_in_the_users_names() -> None:
    table = _table()
    for index in (0, 2):
        table.on_trial_result(0, [], _trial(index, lr=1e-3), _result(1, 1.0, {}))
    line = table.exploit_line(
        _decision(
            target="39e3e_00000",
            source="39e3e_00002",
            exploit_iteration=8,
            old={"lr": 5.6e-4, "lambda": 0.95},
            new={"lr": 5.4e-5, "lambda": 0.97},
        )
    )
    assert line == "PPO_00000 <- PPO_00002 @ it 8: lr 5.6e-4 -> 5.4e-5, lambda_ 0.95 -> 0.97"


def test_numbers_and_clocks_read_short() -> None:
    assert [number(v) for v in (5.6e-4, 0.95, 128, 2.5e7, float("nan"), None, -13.25)] == [
        "5.6e-4", "0.95", "128", "2.5e7", "-", "-", "-13.25"
    ]  # fmt: skip
    assert [clock(s) for s in (7, 273.4, 3729)] == ["0:07", "4:33", "1:02:09"]


def test_the_bar_goes_toward_the_nearest_stop_rule() -> None:
    goal = StopGoal({"training_iteration": 10}, wall_time_s=100, population=4)
    rows = [TrialRecord("a", "RUNNING", rule_values={"training_iteration": 5})]
    # One of four trials half-way: 1/8 of the population; 30 s of 100 is further.
    assert goal.fraction(rows, elapsed_s=0) == pytest.approx(0.125)
    assert goal.fraction(rows, elapsed_s=30) == pytest.approx(0.3)
    target = StopGoal({RETURN_METRIC: 400}, population=4, all_at_return=True)
    best = TrialRecord("b", "RUNNING", rule_values={RETURN_METRIC: 300.0})
    assert target.fraction([best], elapsed_s=0) == pytest.approx(0.75)
    # A negative target makes no fraction: the bar stays at the other rules.
    assert StopGoal({RETURN_METRIC: -150}).fraction([best], 0) == 0.0
    assert "return 400" in target.describe() and "1:40 budget" in goal.describe()
    # stop.population_env_steps: what the trials sampled together, against the budget.
    steps = StopGoal({"training_iteration": 10}, population=4, env_step_budget=400_000)
    assert steps.fraction(rows, elapsed_s=0, sampled=100_000) == pytest.approx(0.25)
    assert steps.fraction(rows, elapsed_s=0, sampled=0) == pytest.approx(0.125)
    assert steps.describe() == "iterations 10, 400,000 env steps in all"
    # The bar names the rule it measures: the budget, not a return it has not reached.
    timed = StopGoal({RETURN_METRIC: 475}, wall_time_s=60, population=4, all_at_return=True)
    scored = [TrialRecord("b", "RUNNING", rule_values={RETURN_METRIC: 401.0})]
    assert timed.nearest(scored, elapsed_s=60) == (1.0, "of the 1:00 budget")
    assert timed.nearest(scored, elapsed_s=6) == (pytest.approx(401 / 475), "toward return 475")
    assert steps.nearest(rows, 0, sampled=100_000) == (0.25, "of 400,000 env steps")


def test_not_a_terminal_plain_lines_and_the_table_once_at_the_end() -> None:
    out = io.StringIO()
    table = _table(interval_s=1e9)
    first, second = _trial(0, lr=1e-3, **{"lambda": 0.9}), _trial(1, lr=2e-3, **{"lambda": 0.9})
    with table.showing(out):
        for trial in (first, second):
            table.on_step(0, [first, second])
            table.on_trial_start(0, [], trial)
            table.on_trial_result(0, [], trial, _result(1, 9.0, trial.config))
        table.on_exploit(
            _decision(
                target=first.trial_id,
                source=second.trial_id,
                exploit_iteration=2,
                old={"lr": 1e-3},
                new={"lr": 2.4e-3},
            )
        )
        table.on_trial_start(0, [], first)  # restarted after the exploit: not "started" again
        table.on_trial_complete(0, [], second)
    text = out.getvalue()
    assert "\x1b" not in text
    lines = text.splitlines()
    assert lines[0] == "PPO_00000 started: lr 0.001, lambda_ 0.9"
    assert sum(line.startswith("PPO_00000 started") for line in lines) == 1
    assert "PPO_00000 <- PPO_00001 @ it 2: lr 0.001 -> 0.0024" in lines
    assert "PPO_00001 finished at iteration 1: return 9" in lines
    assert "elapsed" in lines[-4] and "toward iterations 6" in lines[-4]
    assert sum(line.startswith("trial ") for line in lines) == 1
    assert [line.split()[0] for line in lines[-2:]] == ["PPO_00000", "PPO_00001"]


def test_the_rows_survive_a_resume_and_pickling_leaves_the_view_behind() -> None:
    table = _table()
    trial = _trial(0, lr=1e-3, **{"lambda": 0.9})
    table.on_trial_result(0, [], trial, _result(1, 10.0, trial.config))
    with table.showing(io.StringIO()):
        copy = pickle.loads(pickle.dumps(table))
    assert copy.records.keys() == table.records.keys()
    again = _table()
    state = table.get_state()
    assert state is not None
    again.set_state(pickle.loads(pickle.dumps(state)))
    assert again.records == table.records
    out = io.StringIO()
    with again.showing(out):
        again.on_trial_start(0, [], trial)
    assert out.getvalue().startswith("PPO_00000 resumed at iteration 1: lr 0.001, lambda_ 0.9\n")


def test_the_summary_says_how_long_and_why_it_stopped(tmp_path: Path) -> None:
    trials = [TrialRecord("PPO_00000", "TERMINATED", 6), TrialRecord("PPO_00001", "ERROR", 3)]
    goal = StopGoal({"training_iteration": 6, RETURN_METRIC: 475}, wall_time_s=300)
    why = {
        "target": stop_reason(
            trials, goal, interrupted=False, budget_spent=False, reached_by="PPO_00000"
        ),
        "budget": stop_reason(trials, goal, interrupted=False, budget_spent=True, reached_by=None),
        "rules": stop_reason(
            trials[:1], goal, interrupted=False, budget_spent=False, reached_by=None
        ),
        "error": stop_reason(trials, goal, interrupted=False, budget_spent=False, reached_by=None),
        "interrupted": stop_reason(
            trials, goal, interrupted=True, budget_spent=False, reached_by=None
        ),
        "steps": stop_reason(
            trials,
            StopGoal(goal.rules, env_step_budget=400_000),
            interrupted=False,
            budget_spent=False,
            reached_by=None,
            env_steps_spent=401_234,
        ),
    }
    assert why == {
        "target": "PPO_00000 reached the return target 475, which ends the whole population",
        "budget": "the wall-time budget (5:00) ran out",
        "rules": "every trial reached a stop rule (iterations 6, return 475)",
        "error": "1 of 2 trials failed; the others reached a stop rule (iterations 6, return 475)",
        "interrupted": "interrupted (Ctrl-C or SIGTERM) before its stop rules",
        "steps": "the env-step budget (400,000) was spent: the trials sampled 401,234 env steps",
    }
    summary = RunSummary("x", tmp_path, trials, errors=1, wall_time_s=87.4)
    summary.stop_reason = why["error"]
    assert summary.lines()[1] == f"Ran 1:27 (wall clock); stopped: {why['error']}"


def test_the_libraries_logging_goes_to_the_log_file_not_the_console(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A logger with its own terminal handler (as Ray's and MLflow's are), one that
    propagates to the root (Python's last resort), and a warning: none on the console;
    all in workbench.log, those from before the folder existed too. The workbench's own
    warnings stay on the console as well; its notes (INFO) go to the file only."""
    library = logging.getLogger("fake_ray")
    library.addHandler(logging.StreamHandler(sys.stderr))
    library.propagate = False
    library.setLevel(logging.INFO)
    before = list(library.handlers)
    try:
        with LibraryLogs() as logs:
            library.info("Started a local Ray instance.")
            logs.open_file(tmp_path, "run")
            logging.getLogger("some.lib").warning("Cannot find metric")
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.warn("deprecated thing", UserWarning, stacklevel=1)
            library.warning("Saving experiment state failed")
            logging.getLogger("workbench.tracking.writer").warning("MLflow refused Result")
            logging.getLogger("workbench.tune_ext.pbt").info("[pbt] a trains on")
        assert library.handlers == before and library.propagate is False
        assert logging.getLogger("workbench").level == logging.NOTSET  # as it was
        captured = capfd.readouterr()
        # Only the workbench's own warning is on the console (in the file too).
        assert captured.err == "workbench: MLflow refused Result\n" and captured.out == ""
        log = (tmp_path / LOG_FILE).read_text()
        assert "MLflow refused Result" in log
        assert "[pbt] a trains on" in log  # the workbench's notes: the file only
        for text in ("Started a local Ray", "Cannot find metric", "deprecated thing", "Saving"):
            assert text in log
        # Ray sets its format on every handler of its logger when it starts (after the
        # take-over in a resume): the file keeps the workbench's.
        from ray._private.ray_logging import setup_logger

        with LibraryLogs() as logs:
            logs.open_file(tmp_path, "resume")
            setup_logger(logging.INFO, "RAYS OWN %(message)s")
            logging.getLogger("ray").info("Started again")
        assert "RAYS OWN" not in (tmp_path / LOG_FILE).read_text()
        assert " INFO ray: Started again" in (tmp_path / LOG_FILE).read_text()
        # --verbose: on the console as well.
        with LibraryLogs(verbose=True) as logs:
            logs.open_file(tmp_path, "resume")
            library.warning("shown live")
        assert "shown live" in capfd.readouterr().err
        assert "--- workbench resume" in (tmp_path / LOG_FILE).read_text()
    finally:
        library.handlers = []


def test_run_and_resume_take_verbose() -> None:
    from workbench.cli.main import build_parser

    parser = build_parser()
    assert parser.parse_args(["run", "x.yaml", "--verbose"]).verbose is True
    assert parser.parse_args(["resume", "results/x", "-v"]).verbose is True
    assert parser.parse_args(["run", "x.yaml"]).verbose is False


def test_the_schedulers_read_tunes_controller_without_its_restricted_api_warning() -> None:
    """Tune wraps the controller it hands schedulers; reading ``_checkpoint_manager`` or
    ``_cached_trial_decisions`` through the wrapper logs Ray's warning (once a process)."""
    import ray.util.debug
    from ray.tune.execution.tune_controller import TrialRunnerWrapper
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import TrialScheduler

    from workbench.tune_ext.pbt_pauses import drop_stop_cached_by_pause
    from workbench.tune_ext.scheduler_state import controller_of

    controller = SimpleNamespace(
        _cached_trial_decisions={"t1": TrialScheduler.STOP}, _checkpoint_manager=object()
    )
    wrapper = TrialRunnerWrapper(controller, trial_executor=None)  # type: ignore[arg-type]
    seen = logging.handlers.BufferingHandler(100)
    ray_logger = logging.getLogger("ray.tune.execution.tune_controller")
    ray_logger.addHandler(seen)
    logged = set(ray.util.debug._logged)
    ray.util.debug._logged.clear()
    try:
        assert controller_of(wrapper) is controller and controller_of(controller) is controller
        assert drop_stop_cached_by_pause(
            wrapper, SimpleNamespace(trial_id="t1", status=Trial.PAUSED)
        )
        assert not seen.buffer
        wrapper._checkpoint_manager  # noqa: B018 (the fall: Ray's warning, as Tune reads it)
        assert "restricted" in seen.buffer[0].getMessage()
    finally:
        ray_logger.removeHandler(seen)
        ray.util.debug._logged.update(logged)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_one_table_redrawn_in_place_with_exploits_above_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.support.terminal import screen

    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "100")
    out = _Terminal()
    table = _table(goal=StopGoal({"training_iteration": 2}, wall_time_s=300, population=2))
    table.title = "pop (PPO, PBT)"
    trials = [_trial(1, lr=1e-3, **{"lambda": 0.9}), _trial(0, lr=2e-3, **{"lambda": 0.9})]
    with table.showing(out):
        for iteration in (1, 2):
            for trial in trials:
                table.on_step(0, trials)
                table.on_trial_start(0, [], trial)
                table.on_trial_result(0, [], trial, _result(iteration, 9.0, trial.config))
                table._view.live.refresh()  # type: ignore[union-attr]
            if iteration == 1:
                table.on_exploit(
                    _decision(
                        target=trials[0].trial_id,
                        source=trials[1].trial_id,
                        exploit_iteration=1,
                        old={"lr": 1e-3},
                        new={"lr": 2.4e-3},
                    )
                )
        for trial in trials:
            table.on_trial_complete(0, [], trial)
    output = out.getvalue()
    assert output.count("\x1b[1A") >= 4  # drawn again over itself, not below
    seen = screen(output, 100)
    assert seen[0] == "PPO_00001 <- PPO_00000 @ it 1: lr 0.001 -> 0.0024"
    assert seen[1] == "pop (PPO, PBT): 0:00 elapsed, 5:00 left"
    assert seen[2].endswith(" 100% toward iterations 2")
    assert seen[3].split()[:2] == ["trial", "status"]
    assert [line.split()[:3] for line in seen[4:]] == [
        ["PPO_00000", "TERMINATED", "2"],
        ["PPO_00001", "TERMINATED", "2"],
    ]


def test_a_narrow_terminal_drops_hyperparameter_columns_and_cuts_exploit_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The main job searches 8 values: at 80 columns the trial's own columns stay whole,
    the hyperparameters that do not fit are named below the table, and an exploit that
    changes all 8 is one line that says how many changes it leaves out."""
    from tests.support.terminal import screen

    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "80")
    names = ["lr", "gamma", "lambda_", "clip_param", "entropy_coeff", "vf_loss_coeff"]
    table = ProgressTable({n: n for n in names}, goal=StopGoal({RETURN_METRIC: 475}))
    table.title = "cartpole_pbt_20261130-164327 (PPO, PBT)"
    config = {n: 0.123456 for n in names}
    trials = [_trial(i, **config) for i in range(2)]
    out = _Terminal()
    with table.showing(out):
        for trial in trials:
            table.on_trial_result(0, [], trial, _result(28, 479.7, config))
        table.on_exploit(
            _decision(
                target=trials[0].trial_id,
                source=trials[1].trial_id,
                exploit_iteration=28,
                old=config,
                new={n: 0.5 for n in names},
            )
        )
    seen = screen(out.getvalue(), 80)
    assert all(len(line) <= 80 for line in seen)
    assert seen[0].startswith("PPO_00000 <- PPO_00001 @ it 28: lr 0.1235 -> 0.5, ")
    assert re.search(r", \.\.\. \(\+\d\)$", seen[0])
    header = next(line for line in seen if line.startswith("trial "))
    assert header.split()[:7] == ["trial", "status", "iter", "env", "steps", "return", "best"]
    rows = [line.split() for line in seen if line.startswith("PPO_0000") and "<-" not in line]
    assert [row[:3] for row in rows] == [
        ["PPO_00000", "RUNNING", "28"],
        ["PPO_00001", "RUNNING", "28"],
    ]
    assert header.split()[7:] == ["lr", "gamma", "lambda_", "clip_param"]
    assert seen[-1] == "not shown (too narrow): entropy_coeff, vf_loss_coeff"


def test_what_the_raylet_tells_the_driver_goes_to_the_log_not_across_the_view(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ray._private import worker

    from workbench.tune_ext.ray_private import raylet_messages_logged

    message = "WARNING: 8 PYTHON worker processes have been started on node ..."
    printed = worker.print_to_stdstream

    def publish(text: str) -> None:  # as listen_error_messages hands it on
        worker.print_to_stdstream(
            {"lines": [text], "pid": "raylet", "is_err": False}, ignore_prefix=False
        )

    publish(message + " (1)")  # Ray's own: straight to stdout
    assert "PYTHON worker processes" in capsys.readouterr().out
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    ray_logger = logging.getLogger("ray")
    ray_logger.addHandler(handler)
    try:
        with raylet_messages_logged():
            publish(message + " (2)")
    finally:
        ray_logger.removeHandler(handler)
    assert "PYTHON worker processes" not in capsys.readouterr().out
    assert seen == [f"(raylet) {message} (2)"]
    assert worker.print_to_stdstream is printed
