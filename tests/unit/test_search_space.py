"""Search-space blocks (ParamSpec): the initial distribution, the PBT mutation, the bounds
every perturbation is clamped back into, and the names Tune's param_space uses.

Imports ray.tune (for its domains and PBT's explore step) but never starts Ray.
"""

from __future__ import annotations

import functools
import math
import random
import re
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError
from ray.tune.schedulers.pbt import _explore
from ray.tune.search.sample import Categorical, Domain, Float, Integer, Quantized

from workbench.experiment.algorithms import training_parameters, tune_key
from workbench.experiment.search_space import (
    KINDS,
    ParamSpec,
    clamp_config,
    explore,
    parse_search_space,
)

N_SAMPLES = 2000


def samples(spec: ParamSpec, seed: int = 0, n: int = N_SAMPLES) -> list[Any]:
    domain = spec.domain()
    assert isinstance(domain, Domain)
    drawn = domain.sample(size=n, random_state=np.random.RandomState(seed))
    return list(drawn)


def on_grid(value: float, q: float) -> bool:
    return math.isclose(value / q, round(value / q), abs_tol=1e-9)


# --- domains -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        ParamSpec(uniform=(0.5, 2.0)),
        ParamSpec(loguniform=(1.0e-4, 1.0e-1)),
        ParamSpec(quniform=(0.0, 1.0, 0.25)),
        ParamSpec(qloguniform=(0.5, 64.0, 0.5)),
        ParamSpec(randint=(5, 20)),
    ],
    ids=lambda spec: spec.describe(),
)
def test_numeric_domain_samples_stay_inside_the_inclusive_bounds(spec: ParamSpec) -> None:
    low, high = spec.bounds  # type: ignore[misc]
    drawn = samples(spec)
    assert len(drawn) == N_SAMPLES
    assert all(low <= v <= high for v in drawn), (min(drawn), max(drawn))
    # Spread over the range, not stuck at one value.
    assert len(set(drawn)) >= 5


def test_uniform_domain_is_uniform() -> None:
    drawn = samples(ParamSpec(uniform=(0.5, 2.0)))
    assert statistics.fmean(drawn) == pytest.approx(1.25, abs=0.05)
    assert all(isinstance(v, float) for v in drawn)


def test_loguniform_domain_is_uniform_in_log_space() -> None:
    drawn = samples(ParamSpec(loguniform=(1.0e-4, 1.0e-1)))
    # A uniform draw would have its median near 0.05; log-uniform's is 10**-2.5.
    assert statistics.median(drawn) == pytest.approx(10**-2.5, rel=0.25)
    assert sum(v < 1.0e-3 for v in drawn) == pytest.approx(N_SAMPLES / 3, rel=0.15)


def test_randint_domain_includes_both_ends_and_only_integers() -> None:
    drawn = samples(ParamSpec(randint=(5, 20)))
    assert set(drawn) == set(range(5, 21))
    assert all(isinstance(v, (int, np.integer)) for v in drawn)


def test_randint_of_two_adjacent_integers_gives_both() -> None:
    assert set(samples(ParamSpec(randint=(1, 2)), n=200)) == {1, 2}


def test_quniform_domain_values_lie_on_the_grid_of_q_and_reach_both_bounds() -> None:
    drawn = samples(ParamSpec(quniform=(0.0, 1.0, 0.25)))
    assert set(drawn) == {0.0, 0.25, 0.5, 0.75, 1.0}


def test_qloguniform_domain_values_lie_on_the_grid_of_q() -> None:
    drawn = samples(ParamSpec(qloguniform=(0.5, 64.0, 0.5)))
    assert all(on_grid(v, 0.5) for v in drawn)
    # log-uniform: most of the mass is in the low decades.
    assert statistics.median(drawn) == pytest.approx(math.sqrt(0.5 * 64.0), rel=0.3)


def test_quniform_domain_accepts_bounds_that_are_not_multiples_of_q() -> None:
    # ParamSpec accepts the block and clamp() handles it (see the clamp tests), so the
    # initial distribution must work too: Tune's quniform raises "not divisible by q".
    spec = ParamSpec(quniform=(0.15, 0.95, 0.1))
    drawn = samples(spec)
    assert all(0.15 <= v <= 0.95 and on_grid(v, 0.1) for v in drawn)
    assert {round(v, 9) for v in drawn} == {0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9}


def test_choice_domain_samples_every_value_and_nothing_else() -> None:
    spec = ParamSpec(choice=[64, 128, 256, "auto"])
    domain = spec.domain()
    assert isinstance(domain, Categorical)
    drawn = samples(spec, n=400)
    assert set(drawn) == {64, 128, 256, "auto"}


def test_grid_domain_is_tunes_grid_search() -> None:
    assert ParamSpec(grid=[0.9, 0.99]).domain() == {"grid_search": [0.9, 0.99]}


def test_randint_domain_upper_bound_is_exclusive_in_tune_terms() -> None:
    domain = ParamSpec(randint=(5, 20)).domain()
    assert isinstance(domain, Integer)
    assert (domain.lower, domain.upper) == (5, 21)


# --- mutations and bounds ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["choice", "grid"])
def test_categorical_mutation_is_the_list_of_values(kind: str) -> None:
    values = [64, 128, 256]
    spec = ParamSpec(**{kind: values})
    mutation = spec.mutation()
    assert mutation == values and type(mutation) is list
    assert spec.bounds is None
    assert spec.categorical


@pytest.mark.parametrize(
    ("spec", "domain_type", "lower", "upper"),
    [
        (ParamSpec(uniform=(0.5, 2.0)), Float, 0.5, 2.0),
        (ParamSpec(loguniform=(1.0e-5, 1.0e-2)), Float, 1.0e-5, 1.0e-2),
        (ParamSpec(quniform=(0.0, 1.0, 0.25)), Float, 0.0, 1.0),
        (ParamSpec(qloguniform=(0.5, 64.0, 0.5)), Float, 0.5, 64.0),
        (ParamSpec(randint=(3, 20)), Integer, 3, 21),
    ],
    ids=lambda x: x.describe() if isinstance(x, ParamSpec) else "",
)
def test_numeric_mutation_is_a_domain_over_the_block(
    spec: ParamSpec, domain_type: type[Domain], lower: float, upper: float
) -> None:
    mutation = spec.mutation()
    assert isinstance(mutation, domain_type)
    assert (mutation.lower, mutation.upper) == (lower, upper)
    assert not spec.categorical


def test_quantized_mutation_keeps_q() -> None:
    sampler = ParamSpec(quniform=(0.0, 1.0, 0.25)).mutation().get_sampler()
    assert isinstance(sampler, Quantized) and sampler.q == 0.25


@pytest.mark.parametrize(
    ("spec", "bounds"),
    [
        (ParamSpec(uniform=(0.5, 2.0)), (0.5, 2.0)),
        (ParamSpec(loguniform=(1.0e-5, 1.0e-2)), (1.0e-5, 1.0e-2)),
        (ParamSpec(quniform=(0.15, 0.95, 0.1)), (0.15, 0.95)),
        (ParamSpec(randint=(3, 20)), (3.0, 20.0)),
    ],
    ids=lambda x: x.describe() if isinstance(x, ParamSpec) else "",
)
def test_bounds_are_low_and_high_without_q(spec: ParamSpec, bounds: tuple[float, float]) -> None:
    assert spec.bounds == bounds
    assert all(type(b) is float for b in spec.bounds)  # type: ignore[union-attr]


# --- clamp -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "value", "expected"),
    [
        (ParamSpec(uniform=(0.5, 2.0)), 3.0, 2.0),
        (ParamSpec(uniform=(0.5, 2.0)), 0.1, 0.5),
        (ParamSpec(uniform=(0.5, 2.0)), 1.3, 1.3),
        (ParamSpec(uniform=(0.5, 2.0)), 2.0, 2.0),
        (ParamSpec(loguniform=(1.0e-5, 1.0e-2)), 0.012, 1.0e-2),
        (ParamSpec(loguniform=(1.0e-5, 1.0e-2)), 8.0e-6, 1.0e-5),
        (ParamSpec(loguniform=(1.0e-5, 1.0e-2)), 3.0e-3, 3.0e-3),
    ],
)
def test_clamp_puts_a_continuous_value_back_to_the_nearest_bound(
    spec: ParamSpec, value: float, expected: float
) -> None:
    assert spec.clamp(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(4.4, 5), (2, 5), (20.6, 20), (24, 20), (12.7, 13), (12.2, 12), (np.float64(7.9), 8)],
)
def test_randint_clamp_rounds_and_clamps_to_an_int(value: float, expected: int) -> None:
    clamped = ParamSpec(randint=(5, 20)).clamp(value)
    assert clamped == expected
    assert type(clamped) is int


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1.0, 0.9), (0.96, 0.9), (0.0, 0.2), (0.1, 0.2), (0.15, 0.2), (0.5, 0.5), (0.44, 0.4)],
)
def test_quniform_clamp_snaps_to_the_grid_inside_bounds_that_are_not_multiples_of_q(
    value: float, expected: float
) -> None:
    clamped = ParamSpec(quniform=(0.15, 0.95, 0.1)).clamp(value)
    assert clamped == pytest.approx(expected)
    assert 0.15 <= clamped <= 0.95
    assert on_grid(clamped, 0.1)


@pytest.mark.parametrize(("value", "expected"), [(0.5, 0.3), (0.3, 0.3), (0.0, 0.1)])
def test_quniform_clamp_keeps_a_bound_that_is_on_the_grid(value: float, expected: float) -> None:
    # 3 * 0.1 == 0.30000000000000004 > 0.3: the snap must not push the top value down a step.
    clamped = ParamSpec(quniform=(0.1, 0.3, 0.1)).clamp(value)
    assert clamped == pytest.approx(expected)
    assert 0.1 <= clamped <= 0.3


def test_qloguniform_clamp_snaps_to_the_grid_inside_the_bounds() -> None:
    spec = ParamSpec(qloguniform=(0.5, 64.0, 0.5))
    assert spec.clamp(100.0) == 64.0
    assert spec.clamp(0.1) == 0.5
    assert spec.clamp(3.3) == 3.5


@pytest.mark.parametrize("kind", ["choice", "grid"])
@pytest.mark.parametrize("value", [128, 7, "anything"])
def test_categorical_clamp_passes_the_value_through(kind: str, value: Any) -> None:
    assert ParamSpec(**{kind: [64, 128, 256]}).clamp(value) == value


def test_clamp_config_only_touches_searched_keys() -> None:
    space = {
        "lr": ParamSpec(loguniform=(1.0e-5, 1.0e-2)),
        "num_epochs": ParamSpec(randint=(3, 20)),
        "absent": ParamSpec(uniform=(0.0, 1.0)),
    }
    config: dict[str, Any] = {"lr": 0.5, "num_epochs": 30.4, "gamma": 5.0, "env": {"x": -1}}
    out = clamp_config(config, space)
    assert out == {"lr": 1.0e-2, "num_epochs": 20, "gamma": 5.0, "env": {"x": -1}}
    assert "absent" not in out


# --- validation ------------------------------------------------------------------------------


def test_a_block_with_no_kind_is_rejected() -> None:
    with pytest.raises(ValidationError, match=r"give exactly one of uniform, .*; got none"):
        ParamSpec()


def test_a_block_with_two_kinds_is_rejected() -> None:
    with pytest.raises(ValidationError, match="got uniform, loguniform"):
        ParamSpec.model_validate({"uniform": [0, 1], "loguniform": [0.1, 1]})


def test_every_kind_alone_is_accepted() -> None:
    blocks: dict[str, list[Any]] = {
        "uniform": [0, 1],
        "loguniform": [0.1, 1],
        "quniform": [0, 1, 0.5],
        "qloguniform": [0.5, 4, 0.5],
        "randint": [1, 3],
        "choice": ["a"],
        "grid": [1, 2],
    }
    assert set(blocks) == set(KINDS)
    for kind, value in blocks.items():
        assert ParamSpec.model_validate({kind: value}).kind == kind


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"uniform": [1, 1]}, "uniform needs low < high, got"),
        ({"uniform": [2, 1]}, "uniform needs low < high, got"),
        ({"randint": [5, 5]}, "randint needs low < high"),
        ({"loguniform": [1.0e-2, 1.0e-4]}, "loguniform needs low < high"),
        ({"loguniform": [0, 1]}, "loguniform needs 0 < low < high"),
        ({"qloguniform": [-1, 1, 0.1]}, "qloguniform needs 0 < low < high"),
        ({"quniform": [0, 1, 0]}, "quniform needs a step q > 0, got 0"),
        ({"uniform": [0, "inf"]}, "bounds must be finite"),
        ({"choice": []}, "choice needs at least one value"),
        ({"grid": []}, "grid needs at least one value"),
        ({"uniform": [0, 1, 2]}, "at most 2 items"),
        ({"randint": [0.5, 3]}, "valid integer"),
        ({"logunifrom": [0.1, 1]}, "Extra inputs are not permitted"),
    ],
)
def test_an_insane_block_is_rejected(block: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        ParamSpec.model_validate(block)


def test_a_quantized_block_without_a_grid_point_inside_its_bounds_is_rejected() -> None:
    # No multiple of 0.1 lies in [0.11, 0.19]: nothing can be sampled, and clamp() returns
    # 0.19, which is off the grid.
    with pytest.raises(ValidationError, match="q"):
        ParamSpec(quniform=(0.11, 0.19, 0.1))


def test_parse_search_space_names_the_parameter_in_the_error() -> None:
    with pytest.raises(ValidationError) as info:
        parse_search_space({"lr": {"loguniform": [1.0e-5, 1.0e-2]}, "gamma": {"uniform": [1, 0]}})
    (error,) = info.value.errors()
    assert error["loc"] == ("gamma",)


# --- the motivating bug: PBT's explore step leaves the bounds -----------------------------------

LR_SPACE = {"lr": ParamSpec(loguniform=(1.0e-5, 1.0e-2))}
EXPLORE_ROUNDS = 200


def _explored_lrs(custom_explore_fn: Any, seed: int = 0) -> list[float]:
    random.seed(seed)
    mutations = {name: spec.mutation() for name, spec in LR_SPACE.items()}
    out = []
    for _ in range(EXPLORE_ROUNDS):
        new_config, _ = _explore(
            {"lr": 0.0099, "gamma": 0.99},
            mutations,
            resample_probability=0.0,
            perturbation_factors=(1.2, 0.8),
            custom_explore_fn=custom_explore_fn,
        )
        assert new_config["gamma"] == 0.99
        out.append(new_config["lr"])
    return out


def test_tunes_own_pbt_explore_escapes_the_bounds() -> None:
    lrs = _explored_lrs(custom_explore_fn=None)
    escaped = [lr for lr in lrs if lr > 1.0e-2]
    assert escaped, "Tune now clamps perturbations itself: clamp_config may be unnecessary"
    assert escaped[0] == pytest.approx(0.0099 * 1.2)


def test_clamp_config_as_custom_explore_fn_keeps_pbt_inside_the_bounds() -> None:
    lrs = _explored_lrs(custom_explore_fn=functools.partial(clamp_config, space=LR_SPACE))
    assert all(1.0e-5 <= lr <= 1.0e-2 for lr in lrs), max(lrs)
    # The same seed perturbed upwards the same number of times: those landed on the bound.
    upwards = sum(lr > 1.0e-2 for lr in _explored_lrs(custom_explore_fn=None))
    assert sum(lr == 1.0e-2 for lr in lrs) == upwards > 0
    assert sum(lr == pytest.approx(0.0099 * 0.8) for lr in lrs) == EXPLORE_ROUNDS - upwards


def test_clamped_explore_keeps_randint_and_choice_values_valid() -> None:
    space = {
        "num_epochs": ParamSpec(randint=(3, 20)),
        "minibatch_size": ParamSpec(choice=[64, 128, 256, 512]),
    }
    mutations = {name: spec.mutation() for name, spec in space.items()}
    explore = functools.partial(clamp_config, space=space)
    random.seed(1)
    for _ in range(EXPLORE_ROUNDS):
        new_config, _ = _explore(
            {"num_epochs": 19, "minibatch_size": 512},
            mutations,
            resample_probability=0.25,
            perturbation_factors=(1.2, 0.8),
            custom_explore_fn=explore,
        )
        assert 3 <= new_config["num_epochs"] <= 20 and type(new_config["num_epochs"]) is int
        assert new_config["minibatch_size"] in (64, 128, 256, 512)


# --- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parameter", "key"),
    [
        ("lambda_", "lambda"),
        ("train_batch_size_per_learner", "_train_batch_size_per_learner"),
        ("lr", "lr"),
        ("gamma", "gamma"),
        ("num_epochs", "num_epochs"),
    ],
)
def test_tune_key_maps_ppos_public_names_to_param_space_keys(parameter: str, key: str) -> None:
    assert tune_key("PPO", parameter) == key


def test_ppo_training_parameters_hold_the_usual_hyperparameters() -> None:
    params = training_parameters("PPO")
    expected = {
        "lr",
        "gamma",
        "clip_param",
        "entropy_coeff",
        "num_epochs",
        "minibatch_size",
        "train_batch_size_per_learner",
        "lambda_",
    }
    assert expected <= params
    assert "self" not in params and "kwargs" not in params
    assert "lrr" not in params


# --- PBT's explore step (ParamSpec.perturb, explore) ---------------------------------------------


def _perturbed(spec: ParamSpec, value: Any, *, p: float = 0.0, seed: int = 0) -> list[Any]:
    random.seed(seed)
    return [
        spec.perturb(value, resample_probability=p, factors=(1.2, 0.8))[0]
        for _ in range(EXPLORE_ROUNDS)
    ]


def test_a_small_integer_always_moves_one_up_or_down() -> None:
    # Tune's rounding keeps 2 at 2 under x0.8 (1.6) and x1.2 (2.4).
    values = _perturbed(ParamSpec(randint=(1, 30)), 2)
    assert set(values) == {1, 3} and all(type(v) is int for v in values)


def test_a_large_integer_is_multiplied_and_rounded() -> None:
    assert set(_perturbed(ParamSpec(randint=(1, 100)), 50)) == {40, 60}


def test_an_integer_at_its_bound_stays_inside() -> None:
    values = _perturbed(ParamSpec(randint=(3, 20)), 20)
    assert set(values) == {16, 20}  # x1.2 clamped back to 20; x0.8 is 16


def test_a_resampled_integer_is_an_integer_within_the_bounds() -> None:
    values = _perturbed(ParamSpec(randint=(3, 20)), 10, p=1.0)
    assert all(type(v) is int and 3 <= v <= 20 for v in values)
    assert len(set(values)) > 10


def test_a_quantized_value_moves_at_least_one_step_of_q() -> None:
    # 128 * 1.2 = 153.6 and 128 * 0.8 = 102.4 both snap back to 128 on the grid of 64.
    assert set(_perturbed(ParamSpec(quniform=(64, 1024, 64)), 128.0)) == {64.0, 192.0}


def test_a_choice_moves_to_a_neighbour() -> None:
    spec = ParamSpec(choice=[64, 128, 256, 512])
    assert set(_perturbed(spec, 128)) == {64, 256}
    # At an end the only neighbour, every time (Tune stays put half of the time).
    assert set(_perturbed(spec, 512)) == {256}
    assert set(_perturbed(spec, 64)) == {128}


def test_a_boolean_choice_flips() -> None:
    assert set(_perturbed(ParamSpec(choice=[False, True]), True)) == {False}


def test_a_choice_is_resampled_from_its_values() -> None:
    spec = ParamSpec(grid=["relu", "tanh", "elu"])
    assert set(_perturbed(spec, "relu", p=1.0)) == {"relu", "tanh", "elu"}
    # A value not in the list (an edited file, a resumed trial): resampled.
    assert set(_perturbed(spec, "gelu")) <= {"relu", "tanh", "elu"}


def test_a_continuous_value_is_multiplied_then_clamped() -> None:
    values = _perturbed(ParamSpec(loguniform=(1e-5, 1e-2)), 0.009)
    assert sorted(set(values)) == [pytest.approx(0.009 * 0.8), 1e-2]


def test_explore_perturbs_only_the_searched_keys_of_a_copy() -> None:
    space = {"num_epochs": ParamSpec(randint=(1, 30)), "act": ParamSpec(choice=["a", "b"])}
    config = {"num_epochs": 2, "act": "a", "gamma": 0.99, "model": {"fcnet": [64]}}
    random.seed(0)
    new, operations = explore(config, space, resample_probability=0.0, factors=(1.2, 0.8))
    assert new["num_epochs"] in (1, 3) and new["act"] == "b" and new["gamma"] == 0.99
    assert new["model"] == config["model"] and new["model"] is not config["model"]
    assert set(operations) == {"num_epochs", "act"}
    assert config["num_epochs"] == 2  # the donor's config is untouched


def test_the_experiments_pbt_explores_by_its_blocks(tmp_path: Path) -> None:
    from tests.support.experiments import small_pbt, write_experiment
    from tests.support.schedulers import built_scheduler
    from workbench.experiment.resolve import load_and_resolve
    from workbench.tune_ext.pbt import WorkbenchPBT

    data = small_pbt(
        tmp_path,
        population=2,
        training={"train_batch_size_per_learner": 256, "minibatch_size": 128},
        search_space={"params": {"num_epochs": {"randint": [1, 30]}}},
        scheduler={"type": "pbt", "quantile_fraction": 0.5, "resample_probability": 0.0},
    )
    pbt = built_scheduler(load_and_resolve(write_experiment(tmp_path / "pop.yaml", data)))
    assert isinstance(pbt, WorkbenchPBT)

    donor = SimpleNamespace(config={"num_epochs": 2, "lr": 0.001})
    moved = {pbt._get_new_config(None, donor)[0]["num_epochs"] for _ in range(50)}
    assert moved == {1, 3}
