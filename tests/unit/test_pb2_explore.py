"""PB2's explore step (workbench.tune_ext.pb2_explore): in the search space's scale, with
every live member's point hallucinated, and never two members on one point. Tune's PB2,
given one decision's data, handed three members cloned at one decision the same lr at
the bottom of its range (LunarLander, docs/benchmarks/scheduler-shootout.md)."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pandas as pd
import pytest
from ray.tune.experiment import Trial
from ray.tune.schedulers.pbt import _PBTTrialState

from workbench.tune_ext import pb2_explore
from workbench.tune_ext.pb2_explore import MIN_SEPARATION, crowded, spread_point
from workbench.tune_ext.pb2_scheduler import WorkbenchPB2

BOUNDS: dict[str, Any] = {"lr": [1e-5, 1e-3], "lambda_": [0.9, 1.0]}
GP_BOUNDS = [(-5.0, -3.0), (0.9, 1.0)]


class Member:
    """A trial as PB2 sees it: its name, config and status."""

    def __init__(self, name: str, lr: float, lambda_: float) -> None:
        self.trial_id = name
        self.config: dict[str, Any] = {"lr": lr, "lambda_": lambda_, "fixed": 7}
        self.status = Trial.RUNNING
        self.experiment_tag = name

    def __str__(self) -> str:
        return self.trial_id


def _population() -> tuple[WorkbenchPB2, list[Member]]:
    pb2 = WorkbenchPB2(
        time_attr="training_iteration",
        metric="score",
        mode="max",
        perturbation_interval=4,
        hyperparam_bounds=BOUNDS,
        require_attrs=False,
    )
    pb2.explore_in_log(["lr"])
    members = [
        Member("a", 3e-4, 0.95),
        Member("b", 5e-5, 0.92),
        Member("c", 1e-4, 0.98),
        Member("d", 6e-4, 0.91),
    ]
    rows = []
    for i, m in enumerate(members):
        for time, reward in ((2, -300.0 + 10 * i), (4, -200.0 + 60 * i)):
            rows.append([str(m), time, m.config["lr"], m.config["lambda_"], reward])
    pb2.data = pd.DataFrame(rows, columns=["Trial", "Time", "lr", "lambda_", "Reward"])
    for m in members:
        pb2._trial_state[m] = object()
    return pb2, members


def _gp_point(member: Member) -> list[float]:
    return [math.log10(member.config["lr"]), member.config["lambda_"]]


def _clone_three_from_the_best(pb2: WorkbenchPB2, members: list[Member]) -> None:
    donor = members[-1]
    for target in members[:-1]:
        new, operations = pb2._get_new_config(target, donor)
        assert operations == {}
        target.config = new  # Tune's _exploit: trial.set_config(new_config)


def test_crowded_is_within_the_separation_in_every_dimension() -> None:
    spans = [2.0, 0.1]
    assert crowded([-4.0, 0.95], [[-4.0 + 0.09, 0.95 + 0.004]], spans)
    assert not crowded([-4.0, 0.95], [[-4.0 + 0.09, 0.95 + 0.006]], spans)  # lambda apart
    assert not crowded([-4.0, 0.95], [[-4.0 + 0.11, 0.95]], spans)  # lr apart
    assert not crowded([-4.0, 0.95], [], spans)


def test_a_point_apart_from_the_others_is_kept() -> None:
    assert spread_point([-4.0, 0.95], [[-3.2, 0.92]], GP_BOUNDS, random.Random(0)) == [-4.0, 0.95]


def test_a_crowded_point_is_redrawn_within_the_bounds_apart_from_every_member() -> None:
    others = [[-4.0, 0.95], [-4.9, 0.91]]
    for seed in range(50):
        point = spread_point([-4.0, 0.95], others, GP_BOUNDS, random.Random(seed))
        assert not crowded(point, others, [2.0, 0.1])
        assert all(lo <= p <= hi for p, (lo, hi) in zip(point, GP_BOUNDS, strict=True))


def test_three_clones_at_one_decision_get_three_different_points() -> None:
    random.seed(0)
    np.random.seed(0)  # noqa: NPY002 (Tune's acquisition draws from numpy's global state)
    pb2, members = _population()
    _clone_three_from_the_best(pb2, members)
    points = [_gp_point(m) for m in members]
    spans = [hi - lo for lo, hi in GP_BOUNDS]
    for i, p in enumerate(points):
        assert not crowded(p, points[:i] + points[i + 1 :], spans), points
    for m in members:
        assert 1e-5 <= m.config["lr"] <= 1e-3 and 0.9 <= m.config["lambda_"] <= 1.0
        assert m.config["fixed"] == 7  # what PB2 does not search is the donor's


def test_when_tunes_acquisition_repeats_itself_the_members_still_differ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Tune's GP, fitted on one decision, can put every clone on the same corner.
    def same_corner(
        data: pd.DataFrame, bounds: Any, current: Any, base: Any, old: Any, config: Any
    ) -> Any:
        row = pd.DataFrame([[str(old), 4, -5.0, 0.9, -100.0]], columns=data.columns)
        return {**config, "lr": -5.0, "lambda_": 0.9}, pd.concat([data, row])

    monkeypatch.setattr(pb2_explore, "_explore", same_corner)
    random.seed(1)
    pb2, members = _population()
    _clone_three_from_the_best(pb2, members)
    lrs = [m.config["lr"] for m in members]
    assert len({round(math.log10(lr), 3) for lr in lrs}) == 4, lrs
    assert sum(lr == pytest.approx(1e-5) for lr in lrs) == 1  # the first clone keeps it
    # PB2's data records each clone at the point it will run, in the space's own units.
    added = pb2.data.iloc[-3:]
    assert list(added["Trial"]) == ["a", "b", "c"]
    assert added["lr"].tolist() == pytest.approx(
        [members[0].config["lr"], members[1].config["lr"], members[2].config["lr"]]
    )


def test_the_gp_sees_log_uniform_keys_in_log_space(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def record(
        data: pd.DataFrame, bounds: Any, current: Any, base: Any, old: Any, config: Any
    ) -> Any:
        seen.update(data=data.copy(), bounds=bounds, current=current, config=config)
        return {**config, "lr": -3.5, "lambda_": 0.97}, data

    monkeypatch.setattr(pb2_explore, "_explore", record)
    pb2, members = _population()
    new, _ = pb2._get_new_config(members[0], members[3])
    assert seen["bounds"] == {"lr": (-5.0, -3.0), "lambda_": (0.9, 1.0)}
    assert seen["data"]["lr"].max() == pytest.approx(math.log10(6e-4))
    assert seen["config"]["lr"] == pytest.approx(math.log10(6e-4))
    # Every other live member is hallucinated, not only those placed since the last
    # result (Tune's batch): here the three besides the target.
    assert seen["current"].shape == (3, 2)
    assert new["lr"] == pytest.approx(10**-3.5)
    assert pb2.data["lr"].max() == pytest.approx(1e-3 * 0.6)  # back in lr's own units


def test_a_finished_member_is_no_longer_hallucinated(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def record(
        data: pd.DataFrame, bounds: Any, current: Any, base: Any, old: Any, config: Any
    ) -> Any:
        seen["current"] = current
        return dict(config), data

    monkeypatch.setattr(pb2_explore, "_explore", record)
    pb2, members = _population()
    members[1].status = Trial.TERMINATED
    pb2._get_new_config(members[0], members[3])
    assert seen["current"].shape == (2, 2)


def test_the_separation_is_a_small_fraction_of_the_range() -> None:
    assert 0 < MIN_SEPARATION <= 0.1


def _trending_population() -> tuple[WorkbenchPB2, list[Member]]:
    """Members whose improvement falls with lr: Tune's GP mean peaks at a corner."""
    pb2, members = _population()
    rows = []
    for m in members:
        gain = 100.0 * (1 - math.log10(m.config["lr"] / 1e-5) / 2)
        for time in (2, 4):
            rows.append([str(m), time, m.config["lr"], m.config["lambda_"], -300.0 + gain * time])
    pb2.data = pd.DataFrame(rows, columns=["Trial", "Time", "lr", "lambda_", "Reward"])
    return pb2, members


def _clone_three_asynchronously(pb2: WorkbenchPB2, members: list[Member], explore: Any) -> bool:
    """Three members cloned from the best one by one, the donor reporting a newer result
    between decisions (an asynchronous population); whether two members ended crowded."""
    donor = members[-1]
    for time, target in enumerate(members[:-1], start=5):
        row = [str(donor), time, donor.config["lr"], donor.config["lambda_"], -100.0 + time]
        pb2.data = pd.concat([pb2.data, pd.DataFrame([row], columns=pb2.data.columns)])
        target.config = explore(pb2, target, donor)[0]
    points = [_gp_point(m) for m in members]
    spans = [hi - lo for lo, hi in GP_BOUNDS]
    return any(crowded(p, points[:i] + points[i + 1 :], spans) for i, p in enumerate(points))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_tunes_pb2_puts_a_clone_on_a_members_point_and_the_workbenchs_does_not() -> None:
    from ray.tune.schedulers.pb2 import PB2

    tunes: list[bool] = []
    ours: list[bool] = []
    for seed in range(6):
        for crowds, explore in ((tunes, PB2._get_new_config), (ours, WorkbenchPB2._get_new_config)):
            random.seed(seed)
            np.random.seed(seed)  # noqa: NPY002 (Tune's acquisition draws from numpy's global state)
            pb2, members = _trending_population()
            crowds.append(_clone_three_asynchronously(pb2, members, explore))
    assert any(tunes), "Tune's PB2 no longer crowds: is the fix still needed?"
    assert not any(ours)


def test_pb2_decides_nothing_in_its_burn_in_but_gathers_its_data() -> None:
    pb2, members = _population()
    pb2.data = pd.DataFrame()
    pb2.burn_in(8)
    for m in members:
        pb2._trial_state[m] = _PBTTrialState(m)  # type: ignore[arg-type]
    for time in (2, 4, 6):
        for m in members:
            result = {"training_iteration": time, "score": -300.0 + 40 * time}
            assert pb2.on_trial_result(None, m, result) == "CONTINUE"  # type: ignore[arg-type]
    # No decision yet: no perturbation, no PBT score...
    assert all(pb2._trial_state[m].last_perturbation_time == 0 for m in members)
    # ... but every evaluated result is a row of the GP's data, in the config's units.
    assert len(pb2.data) == 12
    assert set(pb2.data["Trial"]) == {"a", "b", "c", "d"}
    assert pb2.data["lr"].tolist()[:4] == [m.config["lr"] for m in members]
    # A result without the ranked metric (no evaluation that iteration) is no row.
    pb2.on_trial_result(None, members[0], {"training_iteration": 7})  # type: ignore[arg-type]
    assert len(pb2.data) == 12
