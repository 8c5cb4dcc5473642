"""What the inspection commands print: tables that fit the terminal (--wide: all in one),
integers as integers in JSON, `show`'s metrics grouped and ranked, `diagnose`'s shared
recommendation said once, and `run --dry-run`'s trials with their sampled values."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from tests.support.experiments import small_pbt, tiny_ppo, write_experiment
from tests.support.policies import learner_group_checkpoint
from tests.support.stores import Store, new_store
from workbench.cli.format import metric_groups, table, wrapped
from workbench.cli.main import main
from workbench.names import EVAL_RETURN_METRIC, RESOLVED_FILE, SCORE_METRIC, STEPS_METRIC

HPS = {
    "lr": [3.0e-4, 1.2e-4],
    "gamma": [0.98123, 0.98123],
    "lambda_": [0.95, 0.95],
    "clip_param": [0.2, 0.25],
    "entropy_coeff": [0.0123, 0.0123],
    "vf_loss_coeff": [0.5, 0.5],
    "num_epochs": [8.0, 8.0],
    "minibatch_size": [256.0, 512.0],
}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """Population "cartpole_pbt_20260130-141502" of three trials searching eight
    hyperparameters, as ppo.yaml's space does, with the metrics of every group."""
    store = new_store(tmp_path / "results")
    pop = store.population("cartpole_pbt_20260130-141502", experiment="cartpole_pbt")
    for i in range(3):
        store.trial(
            pop,
            f"PPO_0000{i}",
            returns=[10.0 * i, 20.0 * i + 1],
            metrics={
                **{f"hp/{k}": v for k, v in HPS.items()},
                SCORE_METRIC: [5.0 * i, 9.0 * i],
                EVAL_RETURN_METRIC: [100.0 + i],
                STEPS_METRIC: [2000.0, 4000.0],
                "time_total_s": [1.5, 3.25],
                "learners/default_policy/total_loss": [0.5, 0.25],
                "timers/training_iteration": [1.4, 1.5],
                "workbench/sampling_s": [0.2, 0.3],
                "perf/cpu_util_percent": [50.0, 60.0],
            },
            params={"lr": "0.0003", "minibatch_size": "256", "trial_id": f"abc_0000{i}"},
        )
    return store


def test_the_leaderboard_wraps_to_the_terminal_and_wide_is_one_table(
    store: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for columns in (80, 100):
        monkeypatch.setenv("COLUMNS", str(columns))
        assert main(["runs", "cartpole_pbt", "--store", store.uri]) == 0
        out = capsys.readouterr().out
        assert max(len(line) for line in out.splitlines()) <= columns, out
        lines = out.splitlines()
        lines = lines[lines.index(next(x for x in lines if x.startswith("#  trial"))) :]
        blocks = "\n".join(lines).split("\n\n")
        assert len(blocks) > 1
        for block in blocks:  # each block says whose row it is
            assert block.startswith("#  trial"), block
            assert [r.split()[1] for r in block.splitlines()[1:]] == [
                "PPO_00002",
                "PPO_00001",
                "PPO_00000",
            ]
        headers = " ".join(block.splitlines()[0] for block in blocks).split()
        for hp in HPS:
            assert headers.count(hp) == 1, hp  # wrapped, none dropped
    assert main(["runs", "cartpole_pbt", "--store", store.uri, "--wide"]) == 0
    wide = capsys.readouterr().out.splitlines()
    # The title, the line on the population's result (none chosen here), then the table.
    assert wide[1].startswith("No result chosen") and "training score: PPO_00002" in wide[1]
    header = next(line for line in wide if line.startswith("#  trial"))
    assert len(header) > 100 and all(hp in header for hp in HPS)
    assert sum(line.startswith("#  trial") for line in wide) == 1  # one table


def test_the_population_list_fits_and_wide_adds_the_run_ids(
    store: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["runs", "--store", store.uri]) == 0
    out = capsys.readouterr().out
    # Nothing wider, but the title's store URI (a path, where the test's folder lies).
    assert max(len(line) for line in out.splitlines() if store.uri not in line) <= 100, out
    run_id = json.loads(_json(capsys, ["runs", "--store", store.uri, "--json"]))[0]["run_id"]
    assert run_id not in out
    assert main(["runs", "--store", store.uri, "--wide"]) == 0
    assert run_id in capsys.readouterr().out


def test_the_leaderboard_and_the_population_list_as_csv(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    board = list(
        csv.DictReader(
            io.StringIO(_json(capsys, ["runs", "cartpole_pbt", "--store", store.uri, "--csv"]))
        )
    )
    as_json = json.loads(_json(capsys, ["runs", "cartpole_pbt", "--store", store.uri, "--json"]))
    # The same trials in the same order as the leaderboard, every --json column, and
    # each hyperparameter as hp/<name>, as MLflow names them.
    assert [row["name"] for row in board] == [t["name"] for t in as_json["trials"]]
    assert [row["rank"] for row in board] == ["1", "2", "3"]
    assert float(board[0]["best_return"]) == as_json["trials"][0]["best_return"]
    assert {f"hp/{k}" for k in HPS} <= set(board[0])
    assert int(board[0]["hp/minibatch_size"]) == 512
    listed = csv.DictReader(io.StringIO(_json(capsys, ["runs", "--store", store.uri, "--csv"])))
    (row,) = listed
    assert row["name"].startswith("cartpole_pbt") and row["trials"] == "3"
    populations = json.loads(_json(capsys, ["runs", "--store", store.uri, "--json"]))
    assert row["run_id"] == populations[0]["run_id"]


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def test_integers_are_integers_in_json(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    board = json.loads(_json(capsys, ["runs", "cartpole_pbt", "--store", store.uri, "--json"]))
    hps = board["trials"][0]["hyperparameters"]
    assert hps["minibatch_size"] == 512 and type(hps["minibatch_size"]) is int
    assert type(hps["num_epochs"]) is int and type(hps["lr"]) is float
    detail = json.loads(_json(capsys, ["show", "PPO_00001", "--store", store.uri, "--json"]))
    metrics = detail["metrics"]
    assert type(metrics["training_iteration"]) is int
    assert type(metrics[STEPS_METRIC]) is int and metrics[STEPS_METRIC] == 4000
    assert type(metrics["hp/minibatch_size"]) is int
    assert type(metrics["time_total_s"]) is float
    assert [s["values"]["minibatch_size"] for s in detail["schedule"]] == [256, 512]
    assert all(type(s["values"]["minibatch_size"]) is int for s in detail["schedule"])
    assert '"minibatch_size": 256,' in _json(
        capsys, ["show", "PPO_00001", "--store", store.uri, "--json"]
    )


def test_show_groups_and_ranks_the_metrics(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "PPO_00002", "--store", store.uri]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    groups = [line.strip() for line in lines if line.startswith("  ") and line.endswith(":")]
    assert groups[:4] == ["return:", "evaluation:", "progress and throughput:", "learning:"]
    first_metrics = [line.split()[0] for line in lines if line.startswith("    ")][:3]
    assert first_metrics == [SCORE_METRIC, "env_runners/episode_return_mean", EVAL_RETURN_METRIC]
    # The initial hyperparameters without trial_id, numbers as the tables show them.
    assert not any(line.split()[:1] == ["trial_id"] for line in lines)
    assert "  lr              0.0003 -> 0.00012" in lines
    assert "  minibatch_size  256 -> 512" in lines
    # Timers are counted, not listed, unless --wide.
    assert "timers/training_iteration" not in out
    assert "(3 time split and timers: --wide lists them)" in out
    assert main(["show", "PPO_00002", "--store", store.uri, "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "timers/training_iteration" in wide and "perf/cpu_util_percent" in wide


def test_metric_groups_keep_every_metric_once() -> None:
    keys = [SCORE_METRIC, "hp/lr", "x/unknown", "eval/return_std", "learners/a/b_timer"]
    groups = dict(metric_groups(keys))
    assert groups == {
        "return": [SCORE_METRIC],
        "evaluation": ["eval/return_std"],
        "time split and timers": ["learners/a/b_timer"],
        "other": ["x/unknown"],
    }


def _split(sampling: float, learner: float) -> dict[str, list[float]]:
    """workbench/* metrics of four iterations of 1 s with this split."""
    figures = {
        "iteration_s": 1.0,
        "sampling_s": sampling,
        "learner_s": learner,
        "sync_s": 0.02,
        "runner_s": sampling,
        "learner_busy_s": learner,
        "env_steps_sampled": 1000.0,
        "env_steps_trained": 1000.0,
    }
    return {f"workbench/{k}": [v] * 4 for k, v in figures.items()}


def test_diagnose_says_a_shared_recommendation_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = new_store(tmp_path / "results")
    pop = store.population("pop")
    for i, (sampling, learner) in enumerate([(0.75, 0.2), (0.7, 0.25), (0.1, 0.85)]):
        store.trial(pop, f"PPO_0000{i}", returns=[1, 2, 3, 4], metrics=_split(sampling, learner))
    assert main(["diagnose", "pop", "--store", store.uri]) == 0
    out = capsys.readouterr().out
    assert "Trial PPO_00000: sampling-bound" in out and "Trial PPO_00001: sampling-bound" in out
    assert "Population pop (3 trials together): sampling-bound" in out
    # The two sampling-bound trials share the population's advice: said once, there.
    assert out.count("-> add env runners") == 1
    assert out.index("-> add env runners") > out.index("Population pop (3 trials")
    # The learner-bound trial keeps its own.
    assert out.count("-> the learner is the limit") == 1
    assert max(len(line) for line in out.splitlines()) <= 100
    assert main(["diagnose", "pop", "--store", store.uri, "--wide"]) == 0
    assert capsys.readouterr().out.count("-> add env runners") == 3


def test_wrapping_and_tables_keep_every_word_and_cell() -> None:
    line = "  -> " + " ".join(f"word{i}" for i in range(40))
    out = wrapped([line], 30)
    assert all(len(x) <= 30 for x in out)
    assert out[1].startswith("     word")  # under the text, past the arrow
    assert " ".join(out).split() == line.split()
    rows = [[str(i), *(f"c{i}{j}" for j in range(12))] for i in range(3)]
    text = table(["k", *(f"col{j}" for j in range(12))], rows, width=24)
    assert all(len(x) <= 24 for x in text.splitlines())
    assert sorted(text.split()) == sorted(
        [*(["k"] * len(text.split("\n\n"))), *(f"col{j}" for j in range(12))]
        + [c for r in rows for c in r[1:]]
        + [r[0] for r in rows] * len(text.split("\n\n"))
    )


def test_dry_run_lists_the_trials_it_would_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    space = {
        "lr": {"loguniform": [1.0e-4, 1.0e-2]},
        "minibatch_size": {"choice": [64, 128]},
    }
    data = tiny_ppo(
        tmp_path,
        population=3,
        training={"train_batch_size_per_learner": 256},
        search_space={"params": space},
    )
    path = write_experiment(tmp_path, data)
    assert main(["run", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) < 15  # not the resolved YAML: that is behind --yaml
    assert "Would start 3 trials of PPO on sim_ext/CartPole-v1" in out
    header = lines.index("trial      lr         minibatch_size")
    rows = [line.split() for line in lines[header + 1 : header + 4]]
    assert [r[0] for r in rows] == ["PPO_00000", "PPO_00001", "PPO_00002"]
    for _, lr, minibatch in rows:
        assert 1.0e-4 <= float(lr) <= 1.0e-2 and minibatch in ("64", "128")
    assert len({r[1] for r in rows}) == 3
    assert main(["run", str(path), "--dry-run"]) == 0  # the seeded searcher: same trials
    assert capsys.readouterr().out.splitlines()[header:] == lines[header:]
    assert main(["run", str(path), "--dry-run", "--yaml"]) == 0
    assert "search_space:" in capsys.readouterr().out


def test_the_exports_answer_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """export-schedule and export-policy take --json as the other inspection commands do."""
    results = tmp_path / "results"
    folder = results / "pop"
    folder.mkdir(parents=True)
    source = small_pbt(tmp_path, search_space={"params": {"lr": {"loguniform": [1e-4, 1e-2]}}})
    (folder / RESOLVED_FILE).write_text(yaml.safe_dump(source, sort_keys=False))
    store = new_store(results)
    pop = store.population("pop", results_dir=folder)
    store.trial(
        pop,
        "PPO_00000",
        returns=[1.0, 2.0, 3.0, 4.0],
        metrics={"hp/lr": [0.001, 0.001, 0.002, 0.002]},
        params={"lr": "0.001"},
    )
    output = tmp_path / "replay.yaml"
    argv = ["export-schedule", "--population", "pop", "-o", str(output), "--json"]
    data = json.loads(_json(capsys, [*argv, "--store", store.uri]))
    assert data["file"] == str(output) and output.is_file()
    assert (data["population"], data["trial"], data["iterations"]) == ("pop", "PPO_00000", 4)
    assert [s["iteration"] for s in data["steps"]] == [1, 3]
    assert data["ancestry"][0]["trial_name"] == "PPO_00000"

    checkpoint = learner_group_checkpoint(tmp_path / "checkpoint", "PPO", "sim_ext/CartPole-v1")
    policy = tmp_path / "policy"
    data = json.loads(
        _json(capsys, ["export-policy", str(checkpoint), "-o", str(policy), "--json"])
    )
    files = data["exported"]  # and "logged": the MLflow model, when there is a run
    assert files["folder"] == str(policy)
    assert {Path(p).parent for p in files["files"].values()} == {policy}
    assert all(Path(p).is_file() for p in files["files"].values())
    assert files["spec"]["env_id"] == "sim_ext/CartPole-v1"


def test_the_lineage_tree_wraps_under_its_branches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = new_store(tmp_path / "results")
    pop = store.population("pop")
    for i in range(3):
        store.trial(pop, f"PPO_0000{i}", returns=[1.0 + i] * 4, metrics={"hp/lr": [0.1] * 4})
    changed = {
        "old": {"clip_param": 0.105, "entropy_coeff": 0.0008195, "lr": 0.0008145},
        "new": {"clip_param": 0.3175, "entropy_coeff": 0.01187, "lr": 2.469e-05},
    }
    store.lineage(
        pop,
        [
            {
                "seq": seq,
                "time": 1.0,
                "target": f"abc_0000{target}",
                "target_name": f"PPO_0000{target}",
                "source": "abc_00002",
                "source_name": "PPO_00002",
                "target_iteration": 2,
                "source_iteration": 2,
                **changed,
            }
            for seq, target in enumerate([0, 1])
        ],
    )
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["lineage", "--store", store.uri]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    first = next(i for i, line in enumerate(lines) if line.startswith("  ├─ it 2: PPO_0000"))
    assert lines[first + 1].startswith("  │    ")  # the branch goes on beside its text
    last = next(i for i, line in enumerate(lines) if line.startswith("  └─ it 2: PPO_0000"))
    assert lines[last + 1].startswith("       ") and "2.469e-05" in lines[last + 1]
    assert main(["lineage", "--store", store.uri, "--wide"]) == 0
    wide = capsys.readouterr().out.splitlines()
    assert len(wide) == len(lines) - 2 and max(len(line) for line in wide) > 80


def test_a_dry_run_of_an_optuna_study_shows_what_it_can_draw_quietly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # TPE suggests a trial only as the limit lets one start: the dry run shows those, says
    # the rest come from results, and Optuna's own log line stays off the console.
    data = tiny_ppo(
        tmp_path,
        population=4,
        max_concurrent=2,
        search={"type": "optuna"},
        search_space={"params": {"lr": {"loguniform": [1.0e-4, 1.0e-2]}}},
    )
    path = write_experiment(tmp_path, data)
    assert main(["run", str(path), "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "Would start 4 trials of PPO on sim_ext/CartPole-v1, 2 at a time" in captured.out
    assert "grid points" not in captured.out
    assert "(the first 2; optuna suggests the other 2 from the results" in captured.out
    assert "study created" not in captured.err
