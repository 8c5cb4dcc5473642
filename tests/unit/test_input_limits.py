"""Input that used to pass `validate` and fail late (or never), or end in a traceback:
each is now one line per problem, naming the file and the field, exit 2, before Ray."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import ray

from tests.support.experiments import tiny_ppo, write_experiment
from workbench.cli import main
from workbench.errors import ExperimentError
from workbench.experiment.bounds import BOUNDS, value_problem
from workbench.experiment.resolve import load_and_resolve
from workbench.experiment.yaml_input import MAX_FILE_BYTES, parse_yaml, read_yaml
from workbench.names import RESOLVED_FILE
from workbench.run.results_folder import find_results_dir


def _validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(["validate", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if line.strip()]


def _problem(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    code, lines = _validate(path, capsys)
    assert code == 2, lines
    assert lines, "no message"
    return "\n".join(lines)


NAN, INF = math.nan, math.inf


@pytest.mark.parametrize(
    ("fields", "field", "fragment"),
    [
        ({"training": {"train_batch_size_per_learner": "lots"}}, "training.train_batch", "lots"),
        ({"training": {"train_batch_size_per_learner": -100}}, "training.train_batch", "range"),
        ({"training": {"train_batch_size_per_learner": 0}}, "training.train_batch", "range"),
        ({"training": {"train_batch_size_per_learner": NAN}}, "training.train_batch", "finite"),
        ({"training": {"lr": -0.001}}, "training.lr", "range"),
        ({"training": {"num_epochs": 2.5}}, "training.num_epochs", "integer"),
        ({"training": {"gamma": 1.5}}, "training.gamma", "(0, 1]"),
        ({"population": 10**12}, "population", "1000000"),
        ({"resources": {"env_runners": {"envs_per_runner": 10**12}}}, "envs_per_runner", ""),
        ({"resources": {"env_runners": {"count": 10**9}}}, "env_runners.count", ""),
        ({"resources": {"cpus_main": INF}}, "resources.cpus_main", "finite"),
        ({"evaluation": {"episodes": 10**12}}, "evaluation.episodes", ""),
        ({"stop": {"return_mean": NAN}}, "stop.return_mean", "finite"),
        ({"name": "x" * 5000}, "name", "100"),
        ({"env": {"id": "sim_ext/CartPole-v1", "config": {"max_episode_steps": 2.7}}}, "", ""),
        (
            {"search_space": {"params": {"lr": {"uniform": [-1.0, 0.1]}}}},
            "search_space.params.lr",
            "low",
        ),
        (
            {"search_space": {"params": {"num_epochs": {"randint": [-3, 5]}}}},
            "search_space.params.num_epochs",
            "low",
        ),
        (
            {"search_space": {"params": {"num_epochs": {"uniform": [1, 5]}}}},
            "search_space.params.num_epochs",
            "randint",
        ),
        (
            {"search_space": {"params": {"minibatch_size": {"choice": [64, 0]}}}},
            "search_space.params.minibatch_size",
            "choice value 0",
        ),
    ],
    ids=lambda v: str(v)[:40] if not isinstance(v, dict) else None,
)
def test_bad_values_are_refused_with_the_file_and_the_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fields: dict[str, Any],
    field: str,
    fragment: str,
) -> None:
    path = tmp_path / "bad.yaml"
    # JSON is YAML, and it spells NaN and Infinity where safe_dump would not round-trip.
    path.write_text(json.dumps(tiny_ppo(tmp_path, **fields)).replace("NaN", ".nan"))
    path.write_text(path.read_text().replace("Infinity", ".inf"))
    message = _problem(path, capsys)
    assert str(path) in message
    if field == "":
        field = "env.config.max_episode_steps"
    assert field in message and fragment in message, message


def test_a_grid_larger_than_max_trials_is_refused_unless_confirmed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = {"grid": list(range(1, 1001))}
    space = {"params": {"num_epochs": grid, "minibatch_size": {"grid": list(range(1, 1001))}}}
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, search_space=space, population=4))
    message = _problem(path, capsys)
    assert "would start 4,000,000 trials (population 4 x 1,000,000 grid points)" in message
    assert "max_trials 10,000" in message
    # Confirmed by raising max_trials (up to a million: more is no search a cluster runs).
    space["params"]["minibatch_size"] = {"grid": list(range(1, 31))}
    large = tiny_ppo(tmp_path, search_space=space, population=4)
    assert "would start 120,000 trials" in _problem(write_experiment(tmp_path, large), capsys)
    code, lines = _validate(write_experiment(tmp_path, {**large, "max_trials": 120_000}), capsys)
    assert code == 0, lines


def test_storage_must_be_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("not a folder")
    data = tiny_ppo(tmp_path)
    data["storage"] = str(tmp_path / "afile")
    message = _problem(write_experiment(tmp_path, data), capsys)
    assert "storage" in message and "is a file" in message


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("name: a\nname: b\n", "duplicate key 'name' (first at line 1)"),
        ("\ufeffname: [\n", "invalid YAML at line"),
    ],
)
def test_yaml_problems_name_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, fragment: str
) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(content, encoding="utf-8")
    assert fragment in _problem(path, capsys)


def test_a_billion_laughs_is_refused_before_it_expands(tmp_path: Path) -> None:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 10):
        name, prev = chr(ord("a") + level), chr(ord("a") + level - 1)
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ExperimentError, match="expand to 4,412,961,516 values"):
        read_yaml(path)
    # A few aliases, as people use them, still work.
    assert parse_yaml("base: &b {lr: 0.1}\nother: *b\n", "s") == {
        "base": {"lr": 0.1},
        "other": {"lr": 0.1},
    }


def test_a_huge_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("w") as f:
        f.write("name: x\n# " + "y" * (MAX_FILE_BYTES + 10) + "\n")
    with pytest.raises(ExperimentError, match="at most 1,000,000 bytes"):
        read_yaml(path)


def test_validate_names_each_bad_encoding_and_goes_on_to_the_next_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write_experiment(tmp_path / "good.yaml", tiny_ppo(tmp_path))
    utf16 = tmp_path / "utf16.yaml"
    utf16.write_text("name: probe\n", encoding="utf-16")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: caf\xe9\n")
    code = main(["validate", str(utf16), str(latin), str(good)])
    captured = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in captured.err
    assert f"{utf16}: is UTF-16 (or binary); save it as UTF-8 text" in captured.err
    assert f"{latin}: is not UTF-8 text (byte 0xe9 on line 1)" in captured.err
    assert f"{good}: ok" in captured.out


def test_a_bad_file_leaves_no_ray_and_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, population=10**12))
    assert main(["run", str(path)]) == 2
    assert "population" in capsys.readouterr().err
    assert not ray.is_initialized()
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "state",
    ['{"trial_data": [["{\\"trial_id\\": ', "[]", None],
    ids=["truncated", "not tune's", "a folder"],
)
def test_resume_of_a_damaged_experiment_state_is_one_line(
    tmp_path: Path, state: str | None
) -> None:
    folder = tmp_path / "results" / "probe"
    folder.mkdir(parents=True)
    (folder / RESOLVED_FILE).write_text("name: probe\n")
    (folder / "tuner.pkl").write_bytes(b"x")
    snapshot = folder / "experiment_state-2026-11-30_12-00-00.json"
    if state is None:
        snapshot.mkdir()
    else:
        snapshot.write_text(state)
    with pytest.raises(ExperimentError, match="experiment state cannot be read") as info:
        find_results_dir(str(folder))
    assert str(snapshot) in str(info.value)


def test_every_bound_accepts_its_edges_and_refuses_beyond() -> None:
    for name, bound in BOUNDS.items():
        if bound.low != -math.inf:
            inside = bound.low if not bound.open_low else bound.low + 1
            assert value_problem(name, inside) is None, name
            assert value_problem(name, bound.low - 1) is not None, name
        assert value_problem(name, math.nan) is not None, name
        assert value_problem(name, "text") is not None, name
        assert value_problem(name, True) is not None, name
    # A setting without a rule must at least be finite, nested values included.
    assert value_problem("replay_buffer_config", {"capacity": 1000}) is None
    assert "finite" in (value_problem("replay_buffer_config", {"alpha": math.inf}) or "")


def test_a_good_experiment_still_resolves(tmp_path: Path) -> None:
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, training={"lr": 1e-3, "gamma": 0.99}))
    resolved = load_and_resolve(path)
    assert resolved.experiment.training == {"lr": 1e-3, "gamma": 0.99}
