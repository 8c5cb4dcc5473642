"""Experiment files: the schema, overrides and resolution, good files and bad ones.

Every bad file must fail the same way: an ``ExperimentError`` (the CLI's exit code 2) whose
problems name the file, the field, the offending value and what would be valid, before
anything starts (no Ray, no results folder). No test here starts Ray.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml

from tests.support.bad_files import problem_about, rejected
from tests.support.configs import config_of_file
from tests.support.experiments import tiny_ppo, write_experiment
from workbench.cli import main
from workbench.errors import ExperimentError
from workbench.experiment.loading import load_experiment
from workbench.experiment.resolve import load_and_resolve
from workbench.experiment.schema import Experiment
from workbench.experiment.yaml_input import apply_overrides

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_EXPERIMENTS = sorted((ROOT / "experiments").glob("*.yaml"))
# LunarLander needs the box2d extra (make test-deps installs it): validated where it is.
if importlib.util.find_spec("Box2D") is None:
    SHIPPED_EXPERIMENTS = [f for f in SHIPPED_EXPERIMENTS if "LunarLander" not in f.read_text()]

LR_BLOCK: dict[str, Any] = {"loguniform": [1.0e-4, 1.0e-2]}
PBT_SPACE: dict[str, Any] = {"params": {"lr": LR_BLOCK}}


# --- helpers -------------------------------------------------------------------------------


def write_text(tmp_path: Path, text: str, name: str = "experiment.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- good files ----------------------------------------------------------------------------


def test_a_minimal_experiment_resolves_with_defaults(tmp_path: Path) -> None:
    path = write_experiment(tmp_path, tiny_ppo(tmp_path))
    resolved = load_and_resolve(path, check_results=True)
    exp = resolved.experiment
    assert (exp.algorithm, exp.env.id, exp.scheduler.type, exp.population) == (
        "PPO",
        "sim_ext/CartPole-v1",
        "fifo",
        4,
    )
    assert resolved.search_space == {}
    assert resolved.discrete_actions is True
    assert resolved.results_dir == (tmp_path / "results" / "probe").resolve()


def test_reporting_settings_reach_rllib_and_unset_ones_keep_the_algorithms(
    tmp_path: Path,
) -> None:
    from workbench.experiment.resolve import load_saved
    from workbench.names import RESOLVED_FILE
    from workbench.run.launch import prepare_results_dir
    from workbench.trial.config import algorithm_config

    data = tiny_ppo(tmp_path, algorithm="IMPALA")
    config = config_of_file(write_experiment(tmp_path, data))
    assert config.min_time_s_per_iteration == 10  # IMPALA's own
    assert config.metrics_num_episodes_for_smoothing == 100

    reporting = {"min_time_s_per_iteration": 1.5, "metrics_num_episodes_for_smoothing": 20}
    data = tiny_ppo(tmp_path, algorithm="IMPALA", reporting=reporting)
    resolved = load_and_resolve(write_experiment(tmp_path, data))
    config = algorithm_config(resolved.experiment, resolved.defaults)
    assert config.min_time_s_per_iteration == 1.5
    assert config.metrics_num_episodes_for_smoothing == 20
    assert (
        config.min_sample_timesteps_per_iteration
        == type(config)().min_sample_timesteps_per_iteration
    )
    # The saved experiment (what resume rebuilds from) keeps them.
    prepare_results_dir(resolved)
    saved = load_saved(resolved.results_dir / RESOLVED_FILE)
    assert saved.experiment.reporting == resolved.experiment.reporting


@pytest.mark.parametrize("kind", ["pbt", "pb2"])
@pytest.mark.parametrize("synch", [False, True])
def test_population_based_schedulers_are_synchronous_when_asked(
    tmp_path: Path, kind: str, synch: bool
) -> None:
    from tests.support.schedulers import built_scheduler

    section = {"type": kind, "quantile_fraction": 0.5, "synch": synch}
    data = tiny_ppo(tmp_path, scheduler=section, search_space=PBT_SPACE)
    built = built_scheduler(load_and_resolve(write_experiment(tmp_path, data)))
    assert built._synch is synch  # type: ignore[attr-defined]


def test_search_space_file_is_found_in_the_project_and_keyed_as_tune_spells_it(
    tmp_path: Path,
) -> None:
    data = tiny_ppo(
        tmp_path,
        scheduler={"type": "pbt"},
        search_space={"file": "ppo.yaml", "params": {"gamma": {"uniform": [0.9, 0.99]}}},
    )
    resolved = load_and_resolve(write_experiment(tmp_path, data), check_results=False)
    assert resolved.search_space_file == ROOT / "search_spaces" / "ppo.yaml"
    # Inline blocks override the file's entry for the same name.
    assert resolved.search_space["gamma"].uniform == (0.9, 0.99)
    assert resolved.search_space["lr"].loguniform == (1.0e-5, 1.0e-2)
    assert resolved.tune_keys["lambda_"] == "lambda"
    assert "lambda" in resolved.tune_space and "lambda_" not in resolved.tune_space


def test_search_space_file_next_to_the_experiment_wins(tmp_path: Path) -> None:
    write_experiment(tmp_path / "ppo.yaml", {"lr": {"uniform": [0.001, 0.002]}})
    data = tiny_ppo(tmp_path, search_space={"file": "ppo.yaml"})
    resolved = load_and_resolve(write_experiment(tmp_path, data), check_results=False)
    assert resolved.search_space_file == tmp_path / "ppo.yaml"
    assert set(resolved.search_space) == {"lr"}


@pytest.mark.parametrize("key", ["population", "num_samples"])
def test_population_and_its_alias_num_samples_are_both_accepted(tmp_path: Path, key: str) -> None:
    data = tiny_ppo(tmp_path, **{key: 9})
    assert load_experiment(write_experiment(tmp_path, data)).population == 9


@pytest.mark.parametrize("spelling", ["ppo", "Ppo", "PPO"])
def test_algorithm_is_case_insensitive(tmp_path: Path, spelling: str) -> None:
    data = tiny_ppo(tmp_path, algorithm=spelling)
    assert load_experiment(write_experiment(tmp_path, data)).algorithm == "PPO"


def test_asha_needs_no_stop_rule_because_max_t_ends_the_trials(tmp_path: Path) -> None:
    data = tiny_ppo(
        tmp_path, stop=None, scheduler={"type": "asha", "max_t": 20}, search_space=PBT_SPACE
    )
    assert load_and_resolve(write_experiment(tmp_path, data), check_results=False).experiment.stop


def test_every_shipped_experiment_validates(capsys: pytest.CaptureFixture[str]) -> None:
    assert SHIPPED_EXPERIMENTS, "experiments/ holds no *.yaml file"
    assert main(["validate", *map(str, SHIPPED_EXPERIMENTS)]) == 0
    out = capsys.readouterr().out
    for file in SHIPPED_EXPERIMENTS:
        assert f"{file}: ok" in out


# --- bad files: the simple cases -----------------------------------------------------------

PBT: dict[str, Any] = {"scheduler": {"type": "pbt"}, "search_space": PBT_SPACE}

# id: (edits of the minimal experiment, field, fragments the message must hold)
BAD_CASES: dict[str, tuple[dict[str, Any], str, tuple[str, ...]]] = {
    "unknown top-level key": (
        {"populaton": 3},
        "populaton",
        ("unknown key 'populaton'", "did you mean 'population'?", "valid:", "'stop'"),
    ),
    "unknown nested key": (
        {"scheduler": {"type": "pbt", "perturbaton_interval": 3}, "search_space": PBT_SPACE},
        "scheduler.perturbaton_interval",
        ("unknown key", "did you mean 'perturbation_interval'?", "'burn_in_period'"),
    ),
    "unknown key in a small section": (
        {"checkpoint": {"frequncy": 2}},
        "checkpoint.frequncy",
        ("did you mean 'frequency'?", "'keep'", "'at_end'"),
    ),
    "unknown scheduler type": (
        {"scheduler": {"type": "pbbt"}},
        "scheduler.type",
        ("'pbbt'", "'asha'", "'fifo'", "'pb2'", "'pbt'"),
    ),
    "wrong type": (
        {"population": "many"},
        "population",
        ("'many'", "valid integer"),
    ),
    "wrong type in a section": (
        {"stop": {"iterations": [5]}},
        "stop.iterations",
        ("[5]", "valid integer"),
    ),
    "out of range": (
        {"population": 0},
        "population",
        ("0: ", "greater than 0"),
    ),
    "out of range in the scheduler": (
        {"scheduler": {"type": "pbt", "quantile_fraction": 0.9}, "search_space": PBT_SPACE},
        "scheduler.quantile_fraction",
        ("0.9", "less than or equal to 0.5"),
    ),
    "unknown algorithm": (
        {"algorithm": "PPPO"},
        "algorithm",
        ("'PPPO'", "did you mean 'PPO'?", "'APPO'", "'DQN'", "'IMPALA'", "'SAC'"),
    ),
    "unknown env id": (
        {"env": {"id": "sim_ext/CartPol-v1"}},
        "env.id",
        ("'sim_ext/CartPol-v1'", "did you mean 'sim_ext/CartPole-v1'?", "sim_ext/Pendulum-v1"),
    ),
    "env_config value out of range": (
        {"env": {"id": "sim_ext/CartPole-v1", "config": {"substeps": -1}}},
        "env.config",
        ("substeps", "-1", "[1, 100000]"),
    ),
    "env_config integer beyond 64 bits": (
        # Found by the fuzz test: pybind11's "Unable to cast" traceback before the fix.
        {"env": {"id": "sim_ext/CartPole-v1", "config": {"substeps": 10**30}}},
        "env.config.substeps",
        ("1" + "0" * 30, "does not fit a 64-bit integer"),
    ),
    "env_config unknown key": (
        {"env": {"id": "sim_ext/CartPole-v1", "config": {"gravty": 9.8}}},
        "env.config",
        ("'gravty'", "valid keys", "substeps"),
    ),
    "inline inverted log range": (
        {"search_space": {"params": {"lr": {"loguniform": [1.0e-2, 1.0e-4]}}}},
        "search_space.params.lr",
        ("loguniform", "[0.01, 0.0001]", "low < high"),
    ),
    "inline non-positive log range": (
        {"search_space": {"params": {"lr": {"loguniform": [0, 1]}}}},
        "search_space.params.lr",
        ("loguniform", "[0.0, 1.0]", "0 < low < high"),
    ),
    "inline block with two kinds": (
        {"search_space": {"params": {"lr": {"uniform": [0, 1], "loguniform": [0.1, 1]}}}},
        "search_space.params.lr",
        ("exactly one of", "got uniform, loguniform"),
    ),
    "searched parameter the algorithm lacks": (
        {"search_space": {"params": {"lrr": LR_BLOCK}}},
        "search_space.params.lrr",
        ("PPO has no hyperparameter 'lrr'", "did you mean 'lr'?"),
    ),
    "ASHA with nothing searched": (
        {"scheduler": {"type": "asha", "max_t": 4}, "search_space": None},
        "search_space",
        ("ASHA needs at least one searched hyperparameter", "only the seeds differ"),
    ),
    "Optuna with nothing searched": (
        {"search": {"type": "optuna"}, "search_space": None},
        "search_space",
        ("Optuna's search needs at least one searched hyperparameter", "fifo"),
    ),
    "a tracking URI MLflow cannot open": (
        {"tracking": {"uri": "ftp://nowhere"}},
        "tracking.uri",
        ("'ftp'", "valid schemes:", "'sqlite'", "'http'"),
    ),
    "another library's name for a hyperparameter": (
        {"search_space": {"params": {"learning_rate": LR_BLOCK}}},
        "search_space.params.learning_rate",
        ("has no hyperparameter 'learning_rate'", "did you mean 'lr'?", "Stable-Baselines3's"),
    ),
    "searched minibatches larger than the train batch": (
        {
            "training": {"train_batch_size_per_learner": 2000},
            "search_space": {"params": {"minibatch_size": {"choice": [4096, 8192]}}},
        },
        "search_space: minibatch_size",
        ("minibatch_size up to 8192", "train_batch_size_per_learner of 2000", "at most 2000"),
    ),
    "a fixed minibatch larger than RLlib's default train batch": (
        {"training": {"minibatch_size": 8000}},
        "training.minibatch_size",
        ("minibatch_size of 8000", "train_batch_size_per_learner of 4000"),
    ),
    "fixed training key the algorithm lacks": (
        {"training": {"clip_parm": 0.2}},
        "training.clip_parm",
        ("PPO has no hyperparameter 'clip_parm'", "did you mean 'clip_param'?"),
    ),
    "parameter both fixed and searched": (
        {"training": {"lr": 0.001}, "search_space": PBT_SPACE},
        "training.lr",
        ("both fixed", "searched", "keep one"),
    ),
    "PBT with optuna": (
        {**PBT, "search": {"type": "optuna"}},
        "search.type",
        ("'optuna'", "population-based", "never", "suggested", "'random'", "'asha'"),
    ),
    "PB2 with a categorical block": (
        {
            "scheduler": {"type": "pb2"},
            "search_space": {"params": {"lr": LR_BLOCK, "minibatch_size": {"choice": [64, 128]}}},
        },
        "search_space",
        ("PB2", "minibatch_size", "categorical", "use PBT, or a numeric block"),
    ),
    "optuna with a grid block": (
        {
            "search": {"type": "optuna"},
            "search_space": {"params": {"minibatch_size": {"grid": [64, 128]}}},
        },
        "search.type",
        ("Optuna", "minibatch_size", "grid", "use choice"),
    ),
    "grid search with a non-grid block": (
        {
            "search": {"type": "grid"},
            "search_space": {"params": {"lr": LR_BLOCK, "gamma": {"grid": [0.9, 0.99]}}},
        },
        "search.type",
        ("'grid'", "lr is not grid", "'random'"),
    ),
    "grid search without any block": (
        {"search": {"type": "grid"}},
        "search.type",
        ("'grid'", "none given"),
    ),
    "PBT without a searched parameter": (
        {"scheduler": {"type": "pbt"}},
        "search_space",
        ("PBT", "at least one searched hyperparameter"),
    ),
    "DQN on a continuous env": (
        {"algorithm": "DQN", "env": {"id": "sim_ext/Pendulum-v1"}},
        "algorithm",
        ("DQN cannot act in a continuous action space", "sim_ext/Pendulum-v1", "'SAC'"),
    ),
    "SAC on a discrete env": (
        {"algorithm": "SAC"},
        "algorithm",
        ("SAC cannot act in a discrete action space", "sim_ext/CartPole-v1", "'DQN'"),
    ),
    "PBT keeping fewer than 3 checkpoints": (
        {**PBT, "checkpoint": {"keep": 2}},
        "checkpoint.keep",
        ("checkpoint.keep: 2", "PBT", "at least 3"),
    ),
    "checkpoint frequency above the perturbation interval": (
        {
            **PBT,
            "scheduler": {"type": "pbt", "perturbation_interval": 2},
            "checkpoint": {"frequency": 3},
        },
        "checkpoint.frequency",
        ("checkpoint.frequency: 3", "perturbation_interval = 2", "frequency <= the interval"),
    ),
    "population times quantile_fraction below one": (
        {**PBT, "population": 3},
        "population",
        ("3 trials", "quantile_fraction 0.25", "0.75 < 1", "raise population"),
    ),
    "no stop rule": (
        {"stop": None},
        "stop",
        ("at least one rule", "return_mean", "iterations"),
    ),
    "stop on a metric never reported": (
        {"stop": {"metrics": {"episode_reward_mean": 100}}},
        "stop.metrics",
        (
            "'episode_reward_mean' is never reported",
            "did you mean 'env_runners/episode_return_mean'?",
            "reported metrics:",
            "'training_iteration'",
        ),
    ),
    "unknown reporting key": (
        {"reporting": {"min_time_s_per_iter": 1}},
        "reporting.min_time_s_per_iter",
        ("did you mean 'min_time_s_per_iteration'?", "'metrics_num_episodes_for_smoothing'"),
    ),
    "negative iteration time": (
        {"reporting": {"min_time_s_per_iteration": -1}},
        "reporting.min_time_s_per_iteration",
        ("-1", "greater than or equal to 0"),
    ),
    "no episodes to smooth over": (
        {"reporting": {"metrics_num_episodes_for_smoothing": 0}},
        "reporting.metrics_num_episodes_for_smoothing",
        ("0", "greater than 0"),
    ),
    "bad results folder name": (
        {"name": "my run/1"},
        "name",
        ("'my run/1'", "pattern"),
    ),
}


@pytest.mark.parametrize(
    ("edits", "field", "fragments"), list(BAD_CASES.values()), ids=list(BAD_CASES)
)
def test_bad_experiment_is_rejected_naming_file_field_value_and_what_is_valid(
    tmp_path: Path, edits: dict[str, Any], field: str, fragments: tuple[str, ...]
) -> None:
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, **edits))
    problem_about(rejected(path), path, field, *fragments)


def test_every_problem_of_a_file_is_reported_at_once(tmp_path: Path) -> None:
    data = tiny_ppo(
        tmp_path,
        training={"lrr": 0.1},
        search_space={"params": {"gama": {"uniform": [0.9, 0.99]}}},
    )
    path = write_experiment(tmp_path, data)
    err = rejected(path)
    problem_about(err, path, "training.lrr", "did you mean 'lr'?")
    problem_about(err, path, "search_space.params.gama", "did you mean 'gamma'?")


# --- bad files: the cases that need more than an edit ----------------------------------------


def test_yaml_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    path = write_text(tmp_path, "name: probe\nalgorithm: PPO: x\n")
    problem = problem_about(rejected(path), path, "", "invalid YAML at line 2, column 15")
    assert "mapping values are not allowed" in problem.message


@pytest.mark.parametrize(
    ("text", "kind"), [("- a\n- b\n", "list"), ("just text\n", "str"), ("", "NoneType")]
)
def test_a_file_that_is_not_a_mapping_is_rejected(tmp_path: Path, text: str, kind: str) -> None:
    path = write_text(tmp_path, text)
    problem = problem_about(rejected(path), path, "", "must be a mapping of sections", kind)
    assert problem.field == ""


def test_a_missing_experiment_file_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    problem_about(rejected(path), path, "", "no such file")


def test_a_missing_search_space_file_says_where_it_looked(tmp_path: Path) -> None:
    data = tiny_ppo(tmp_path, search_space={"file": "nope.yaml"})
    path = write_experiment(tmp_path, data)
    problem = problem_about(rejected(path), path, "search_space.file", "'nope.yaml' not found")
    assert f"looked in {tmp_path}," in problem.message
    assert str(ROOT / "search_spaces") in problem.message


@pytest.mark.parametrize(
    ("block", "fragments"),
    [
        ([1.0e-2, 1.0e-4], ("loguniform needs low < high", "[0.01, 0.0001]")),
        ([0, 1], ("loguniform needs 0 < low < high", "[0.0, 1.0]")),
        ([-1.0e-3, 1.0e-2], ("loguniform needs 0 < low < high", "[-0.001, 0.01]")),
    ],
    ids=["inverted", "zero low", "negative low"],
)
def test_a_bad_log_range_in_a_search_space_file_is_reported_against_that_file(
    tmp_path: Path, block: list[float], fragments: tuple[str, ...]
) -> None:
    space_file = write_experiment(
        tmp_path / "space.yaml", {"gamma": {"uniform": [0.9, 0.99]}, "lr": {"loguniform": block}}
    )
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, search_space={"file": "space.yaml"}))
    problem = problem_about(rejected(path), space_file, "lr", *fragments)
    assert problem.field == "lr"


def test_a_search_space_file_that_is_not_a_mapping_is_reported_against_that_file(
    tmp_path: Path,
) -> None:
    space_file = write_text(tmp_path, "- lr\n- gamma\n", "space.yaml")
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, search_space={"file": "space.yaml"}))
    problem_about(rejected(path), space_file, "", "must map hyperparameter names to blocks")


def test_a_search_space_file_with_a_yaml_error_gives_its_line(tmp_path: Path) -> None:
    space_file = write_text(tmp_path, "lr:\n  loguniform: [1.0e-4, 1.0e-2\n", "space.yaml")
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, search_space={"file": "space.yaml"}))
    problem_about(rejected(path), space_file, "", "invalid YAML at line 3")


def test_a_parameter_of_a_search_space_file_the_algorithm_lacks(tmp_path: Path) -> None:
    write_experiment(tmp_path / "space.yaml", {"lrr": {"loguniform": [1.0e-4, 1.0e-2]}})
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, search_space={"file": "space.yaml"}))
    problem_about(rejected(path), path, "lrr", "space.yaml", "did you mean 'lr'?")


def test_a_results_folder_that_holds_a_run_points_to_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "results" / "probe"
    run_dir.mkdir(parents=True)
    (run_dir / "tuner.pkl").write_bytes(b"")
    path = write_experiment(tmp_path, tiny_ppo(tmp_path))
    # validate ignores the folder; run checks it.
    assert load_and_resolve(path, check_results=False).results_dir == run_dir
    err = rejected(path, check_results=True)
    problem = problem_about(err, path, "storage", str(run_dir), "'probe'")
    assert f"`workbench resume {run_dir}`" in problem.message
    assert "another name or storage folder" in problem.message


def test_an_empty_results_folder_is_not_a_previous_run(tmp_path: Path) -> None:
    (tmp_path / "results" / "probe").mkdir(parents=True)
    path = write_experiment(tmp_path, tiny_ppo(tmp_path))
    assert load_and_resolve(path, check_results=True).experiment.name == "probe"


# --- --set overrides -------------------------------------------------------------------------


def test_set_creates_nested_paths_and_reads_values_as_yaml() -> None:
    raw: dict[str, Any] = {"name": "probe", "stop": None, "training": {"gamma": 0.9}}
    out = apply_overrides(
        raw,
        [
            "stop.iterations=7",
            "training.lr=0.001",
            "env.config.substeps=2",
            "search_space.params.lr.loguniform=[1, 2]",
            "checkpoint.at_end=false",
            "name=other",
        ],
        "f.yaml",
    )
    assert out["stop"] == {"iterations": 7} and type(out["stop"]["iterations"]) is int
    assert out["training"] == {"gamma": 0.9, "lr": 0.001}
    assert out["env"] == {"config": {"substeps": 2}}
    assert out["search_space"]["params"]["lr"]["loguniform"] == [1, 2]
    assert out["checkpoint"]["at_end"] is False
    assert out["name"] == "other"
    assert raw == {"name": "probe", "stop": None, "training": {"gamma": 0.9}}, "input mutated"


def test_set_reads_an_exponent_without_a_dot_as_a_float() -> None:
    # YAML 1.1 (PyYAML) reads 1e-3 as the string '1e-3'; a user typing --set lr=1e-3
    # means the number.
    out = apply_overrides({}, ["training.lr=1e-3", "stop.env_steps=5e4"], "f.yaml")
    assert out["training"]["lr"] == pytest.approx(1e-3)
    assert isinstance(out["training"]["lr"], float)
    assert out["stop"]["env_steps"] == 50000


def test_an_exponent_without_a_dot_in_a_file_is_read_as_a_float(tmp_path: Path) -> None:
    path = write_text(
        tmp_path,
        yaml.safe_dump(tiny_ppo(tmp_path)) + "training:\n  lr: 1e-3\n",
    )
    lr = load_and_resolve(path, check_results=False).experiment.training["lr"]
    assert isinstance(lr, float) and lr == pytest.approx(1e-3)


@pytest.mark.parametrize(
    ("item", "fragments"),
    [
        ("foo", ("'foo' is not key.path=value", "stop.iterations=20")),
        ("stop..iterations=3", ("'stop..iterations' is not a dotted key path",)),
        ("=3", ("'' is not a dotted key path",)),
        ("name.first=x", ("cannot go inside 'name'", "'probe'")),
    ],
    ids=["no equals sign", "empty key", "no key", "into a scalar"],
)
def test_a_malformed_set_is_an_experiment_error(item: str, fragments: tuple[str, ...]) -> None:
    with pytest.raises(ExperimentError) as info:
        apply_overrides({"name": "probe"}, [item], "f.yaml")
    (problem,) = info.value.problems
    assert problem.file == "f.yaml"
    for fragment in fragments:
        assert fragment in problem.message


def test_run_dry_run_applies_set_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, storage="results", population=3))
    before = sorted(tmp_path.rglob("*"))
    argv = ["run", str(path), "--dry-run", "--yaml", "--set", "stop.iterations=7"]
    assert main([*argv, "--set", "seed=11", "--name", "named"]) == 0
    out = capsys.readouterr().out
    printed, _, summary = out.partition("\n\nPopulation named")
    resolved = yaml.safe_load(printed)
    assert resolved["stop"]["iterations"] == 7
    assert resolved["seed"] == 11
    assert resolved["results_dir"] == str(tmp_path.resolve() / "results" / "named")
    assert "Would start 3 trials of PPO on sim_ext/CartPole-v1" in summary
    assert sorted(tmp_path.rglob("*")) == before
    assert not ray.is_initialized()


def test_run_dry_run_counts_grid_points(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tiny_ppo(
        tmp_path,
        population=2,
        search_space={"params": {"gamma": {"grid": [0.9, 0.95, 0.99]}, "lr": LR_BLOCK}},
    )
    assert main(["run", str(write_experiment(tmp_path, data)), "--dry-run"]) == 0
    assert "Would start 6 trials of PPO" in capsys.readouterr().out


def test_run_with_a_malformed_set_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_experiment(tmp_path, tiny_ppo(tmp_path))
    assert main(["run", str(path), "--dry-run", "--set", "foo"]) == 2
    assert f"{path}: --set: 'foo' is not key.path=value" in capsys.readouterr().err


def test_run_with_an_override_that_breaks_the_schema_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_experiment(tmp_path, tiny_ppo(tmp_path))
    assert main(["run", str(path), "--dry-run", "--set", "stop.iterations=-1"]) == 2
    assert f"{path}: stop.iterations: -1: Input should be greater than 0" in (
        capsys.readouterr().err
    )


def test_run_of_a_bad_file_exits_2_without_a_results_folder_or_ray(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, storage="results", algorithm="PPPO"))
    before = sorted(tmp_path.rglob("*"))
    assert main(["run", str(path), "--dry-run"]) == 2
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: algorithm: 'PPPO': unknown algorithm" in err
    assert sorted(tmp_path.rglob("*")) == before
    assert not (tmp_path / "results").exists()
    assert not ray.is_initialized()


# --- the JSON Schema -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported_schema() -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["schema"]) == 0
    schema: dict[str, Any] = json.loads(out.getvalue())
    return schema


def _schema_errors(schema: dict[str, Any], document: Any) -> list[str]:
    jsonschema = pytest.importorskip("jsonschema")
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return [error.message for error in validator_class(schema).iter_errors(document)]


def test_json_schema_accepts_the_shipped_experiment(exported_schema: dict[str, Any]) -> None:
    assert exported_schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    document = yaml.safe_load((ROOT / "experiments" / "cartpole_pbt.yaml").read_text())
    assert _schema_errors(exported_schema, document) == []


def test_json_schema_rejects_an_unknown_top_level_key(exported_schema: dict[str, Any]) -> None:
    document = yaml.safe_load((ROOT / "experiments" / "cartpole_pbt.yaml").read_text())
    document["populaton"] = 4
    errors = _schema_errors(exported_schema, document)
    assert any("'populaton' was unexpected" in e for e in errors), errors


def test_json_schema_rejects_a_bad_scheduler_field(exported_schema: dict[str, Any]) -> None:
    document = yaml.safe_load((ROOT / "experiments" / "cartpole_pbt.yaml").read_text())
    document["scheduler"]["perturbation_interval"] = 0
    assert _schema_errors(exported_schema, document)


def test_json_schema_accepts_the_num_samples_alias(exported_schema: dict[str, Any]) -> None:
    # The loader accepts num_samples (test_population_and_its_alias_...): an editor using
    # the exported schema must not flag it.
    document = yaml.safe_load((ROOT / "experiments" / "cartpole_pbt.yaml").read_text())
    document["num_samples"] = document.pop("population")
    assert _schema_errors(exported_schema, document) == []


def test_json_schema_lists_every_section_of_the_model(exported_schema: dict[str, Any]) -> None:
    # num_samples may appear too: it is population's alias.
    assert set(exported_schema["properties"]) - {"num_samples"} == set(Experiment.model_fields)
    assert exported_schema["additionalProperties"] is False


# --- known gaps in the messages (see the report) -----------------------------------------------


def test_unknown_key_in_a_non_pbt_scheduler_suggests_that_schedulers_keys(tmp_path: Path) -> None:
    data = tiny_ppo(tmp_path, scheduler={"type": "asha", "grace_perod": 3})
    path = write_experiment(tmp_path, data)
    problem = problem_about(rejected(path), path, "scheduler.grace_perod", "unknown key")
    assert "did you mean 'grace_period'?" in problem.message
    assert "'max_t'" in problem.message
    assert "'perturbation_interval'" not in problem.message


def test_misspelled_block_kind_inline_suggests_the_kind(tmp_path: Path) -> None:
    data = tiny_ppo(tmp_path, search_space={"params": {"lr": {"logunifrom": [1e-4, 1e-2]}}})
    path = write_experiment(tmp_path, data)
    problem = problem_about(rejected(path), path, "search_space.params.lr", "'logunifrom'")
    assert "did you mean 'loguniform'?" in problem.message
    assert "valid: none" not in problem.message


def test_misspelled_block_kind_in_a_search_space_file_suggests_the_kind(tmp_path: Path) -> None:
    space_file = write_experiment(tmp_path / "space.yaml", {"lr": {"logunifrom": [1e-4, 1e-2]}})
    path = write_experiment(tmp_path, tiny_ppo(tmp_path, search_space={"file": "space.yaml"}))
    problem = problem_about(rejected(path), space_file, "lr", "logunifrom")
    assert "did you mean 'loguniform'?" in problem.message


def test_the_committed_json_schema_is_current() -> None:
    # Editors read workbench.schema.json (see the experiments' yaml-language-server
    # comment); regenerate it with `workbench schema -o workbench.schema.json`.
    import json

    from workbench.experiment.loading import json_schema

    committed = json.loads(
        (Path(__file__).resolve().parents[2] / "workbench.schema.json").read_text()
    )
    assert committed == json_schema()


def test_an_env_whose_package_is_missing_is_one_problem_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gymnasium as gym

    def make(env_id: str, **config: Any) -> Any:
        raise gym.error.DependencyNotInstalled(
            "Box2D is not installed, you can install it by run `pip install swig` followed by "
            '`pip install "gymnasium[box2d]"`'
        )

    monkeypatch.setattr("workbench.experiment.env_checks.gym.make", make)
    data = tiny_ppo(tmp_path, env={"id": "LunarLanderContinuous-v3"})
    file = write_experiment(tmp_path, data)
    with pytest.raises(ExperimentError) as caught:
        load_and_resolve(file)
    problem_about(
        caught.value,
        file,
        "env.id",
        "LunarLanderContinuous-v3 cannot be built here",
        "pip install -e '.[box2d]'",
    )
