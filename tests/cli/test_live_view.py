"""What a user sees while `workbench run` trains a small PBT population, in a terminal
(a pseudo-terminal: the live view redraws in place) and through a pipe (plain lines): the
workbench's rows, names and exploit lines, and none of Ray's, Tune's or MLflow's own
output, which goes to the results folder's workbench.log.

Two real runs (population 2, 6 iterations, an exploit at iterations 2 and 4): the least
that shows both faces of the console."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.experiments import small_pbt, write_experiment
from tests.support.terminal import run_in_terminal, screen
from workbench.names import LOG_FILE

WORKBENCH = str(Path(sys.executable).parent / "workbench")
COLUMNS = 120

# What must never reach the console: Ray's and MLflow's log lines ("2026-11-30
# 16:19:02,613	WARNING tune_controller.py:2103 -- ...", "2026/11/30 16:19:04 INFO
# mlflow..."), Tune's boxes and blocks, Ray's trial ids, tracebacks.
FOREIGN = {
    "a Ray log line": re.compile(r"\b(INFO|WARNING|ERROR|DEBUG)\b.*\.py:\d+ -- "),
    "an MLflow log line": re.compile(r"\bINFO mlflow\."),
    "Tune's PBT block": re.compile(r"\[WorkbenchPBT\]|\[Exploit\]|Cannot find metric"),
    "Tune's configuration box": re.compile(r"Configuration for experiment|View detailed results"),
    "a TensorBoard hint": re.compile(r"tensorboard --logdir"),
    "a Ray trial id": re.compile(r"\b[0-9a-f]{5}_\d{5}\b"),
    "a traceback": re.compile(r"Traceback \(most recent call last\)"),
    "a token-auth warning": re.compile(r"Token authentication is enabled"),
}
ROW = re.compile(r"^(PPO_\d{5})\s+(RUNNING|PENDING|PAUSED|TERMINATED|ERROR|STOPPED)\s+\d+\s")
# An exploit's line: the values that changed, or "values kept" (PBT's explore can land on
# the values the target had: seen in CI, lr x1.2 of a donor at lr/1.2 and lambda_ at 0.9).
EXPLOIT = re.compile(
    r"^PPO_\d{5} <- PPO_\d{5} @ it \d+: (values kept|((lr|lambda_) \S+ -> \S+(, )?)+)$"
)
# defaults, plan, 2 starts, 2 exploits, 2 ends, status, table (3), summary (~7): 19 lines
# for this run; the budget leaves room for a few more, not for a table per update.
LINE_BUDGET = 30


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("live")
    data = small_pbt(
        folder,
        name="live",
        search_space={
            "params": {"lr": {"loguniform": [1e-5, 1e-2]}, "lambda_": {"uniform": [0.9, 1.0]}}
        },
        scheduler={
            "type": "pbt",
            "perturbation_interval": 2,
            "quantile_fraction": 0.5,
            "synch": True,
        },
        population=2,
        stop={"iterations": 6},
    )
    return write_experiment(folder / "live.yaml", data)


def _foreign(lines: list[str]) -> list[str]:
    return [
        f"{what}: {line[:160]}" for line in lines for what, p in FOREIGN.items() if p.search(line)
    ]


def test_in_a_terminal_the_table_redraws_in_place(experiment: Path) -> None:
    code, output = run_in_terminal(
        [WORKBENCH, "run", str(experiment), "--name", "tty"], experiment.parent, columns=COLUMNS
    )
    seen = screen(output, COLUMNS)
    assert code == 0, "\n".join(seen[-40:])
    assert not _foreign(seen), _foreign(seen)
    # Redrawn, not reprinted: the view was drawn many times (cursor moved up over it),
    # and the screen holds one table with one row per trial.
    assert output.count("\x1b[1A") > 10
    headers = [line for line in seen if line.split()[:2] == ["trial", "status"]]
    assert len(headers) == 1, "\n".join(seen)
    rows = [m[1] for line in seen if (m := ROW.match(line))]
    assert rows == ["PPO_00000", "PPO_00001"], "\n".join(seen)
    # Above it: elapsed time and the bar toward the stop rule.
    title, bar = seen[seen.index(headers[0]) - 2 : seen.index(headers[0])]
    assert title.startswith("tty (PPO, PBT): ") and title.endswith(" elapsed"), title
    assert bar.endswith(" 100% toward iterations 6"), bar
    exploits = [line for line in seen if EXPLOIT.match(line)]
    assert len(exploits) == 2, "\n".join(seen)
    assert any(line.startswith("Ran ") and "(wall clock)" in line for line in seen)
    # The libraries' own lines went to the log file.
    log = (experiment.parent / "results" / "tty" / LOG_FILE).read_text()
    assert "Started a local Ray instance" in log and "[WorkbenchPBT] [Exploit]" in log


def test_through_a_pipe_plain_lines_within_a_line_budget(experiment: Path) -> None:
    done = subprocess.run(
        [WORKBENCH, "run", str(experiment), "--name", "piped"],
        cwd=experiment.parent,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines() + done.stderr.splitlines()
    assert "\x1b" not in done.stdout + done.stderr
    assert not _foreign(lines), _foreign(lines)
    assert done.stderr == ""
    assert len(lines) <= LINE_BUDGET, "\n".join(lines)
    started = [line for line in lines if re.match(r"^PPO_\d{5} started", line)]
    assert len(started) == 2 and all(re.search(r": lr \S+, lambda_ \S+$", s) for s in started)
    assert len([line for line in lines if EXPLOIT.match(line)]) == 2, "\n".join(lines)
    assert [m[1] for line in lines if (m := ROW.match(line))] == ["PPO_00000", "PPO_00001"]
    stopped = next(line for line in lines if line.startswith("Ran ") and "(wall clock)" in line)
    assert stopped.endswith("(wall clock); stopped: every trial reached a stop rule (iterations 6)")
    # The summary's schedule numbers iterations as `workbench show` does.
    best = next(m[1] for line in lines if (m := re.match(r"^Best trial (PPO_\d{5}):", line)))
    start = lines.index("Its hyperparameters over time (first iteration trained with them):")
    summary_iterations = []
    for line in lines[start + 1 :]:
        if not (m := re.match(r"^\s+(\d+): ", line)):
            break
        summary_iterations.append(int(m[1]))
    shown = subprocess.run(
        [WORKBENCH, "show", best, "--population", "piped", "--json"],
        cwd=experiment.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    show_iterations = [step["iteration"] for step in json.loads(shown.stdout)["schedule"]]
    assert summary_iterations == show_iterations and summary_iterations[0] == 1
