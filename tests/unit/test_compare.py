"""`workbench compare`: each population's best-score curve against env steps (the running
maximum over all its trials' results), its final evaluation and totals, printed and drawn
side by side, on stores built without Ray (tests/support/stores.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from tests.support.stores import Store, new_store
from workbench.analysis.compare import best_curve
from workbench.cli import main
from workbench.names import (
    EVAL_EPISODES_METRIC,
    EVAL_RETURN_METRIC,
    EVAL_STD_METRIC,
    POPULATION_WALL_TIME_METRIC,
    SCORE_METRIC,
    STEPS_METRIC,
)


@pytest.fixture
def two_populations(tmp_path: Path) -> Store:
    store = new_store(tmp_path / "results")
    a = store.population("pbt_a")
    store.trial(a, "PPO_00000", metrics={SCORE_METRIC: [10, 30, 20], STEPS_METRIC: [100, 200, 300]})
    store.trial(
        a,
        "PPO_00001",
        metrics={
            SCORE_METRIC: [25, 40],
            STEPS_METRIC: [150, 250],
            EVAL_RETURN_METRIC: [45.0],
            EVAL_STD_METRIC: [2.5],
            EVAL_EPISODES_METRIC: [10],
        },
    )
    store.client.log_metric(a, POPULATION_WALL_TIME_METRIC, 61.5)
    b = store.population("asha_b")
    store.trial(b, "PPO_00000", metrics={SCORE_METRIC: [5, 8], STEPS_METRIC: [100, 200]})
    return store


def test_the_curve_is_the_running_best_in_order_of_env_steps() -> None:
    points = [(300, 20.0), (100, 10.0), (200, 30.0), (150, 25.0), (250, 40.0), (250, 5.0)]
    assert best_curve(points) == [(100, 10.0), (150, 25.0), (200, 30.0), (250, 40.0)]
    assert best_curve([]) == []


def test_compare_prints_and_draws_two_populations(
    two_populations: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "out" / "cmp.png"
    args = ["compare", "pbt_a", "asha_b", "--store", two_populations.uri, "-o", str(png)]
    assert main([*args, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [p["population"] for p in found] == ["pbt_a", "asha_b"]
    a, b = found
    assert a["curve"] == [[100, 10.0], [150, 25.0], [200, 30.0], [250, 40.0]]
    assert b["curve"] == [[100, 5.0], [200, 8.0]]
    assert (a["best_trial"], a["best_score"], a["env_steps"], a["trials"]) == (
        "PPO_00001",
        40,
        550,
        2,
    )
    assert a["evaluation"] == {"trial": "PPO_00001", "mean": 45.0, "std": 2.5, "episodes": 10}
    assert a["wall_time_s"] == 61.5 and b["wall_time_s"] is None and b["evaluation"] is None
    assert (a["steps_reached"], b["steps_reached"]) == (300, 200)
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (1300, 500)

    assert main(args) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    row_a = next(line for line in lines if line.startswith("pbt_a"))
    assert "550" in row_a and "40.0" in row_a and "45.0 ± 2.5 (10) PPO_00001" in row_a
    row_b = next(line for line in lines if line.startswith("asha_b"))
    assert "8.0" in row_b
    assert f"drawn to {png}" in out


def test_the_same_population_twice_is_refused(
    two_populations: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["compare", "pbt_a", "pbt_a", "--store", two_populations.uri]
    assert main([*args, "-o", str(tmp_path / "x.png")]) == 2
    assert "same population" in capsys.readouterr().err
    assert main(["compare", "pbt_a", "nope", "--store", two_populations.uri]) == 2
    assert "no population or experiment named 'nope'" in capsys.readouterr().err


def test_populations_from_two_stores_side_by_side(
    two_populations: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A laptop's population beside a cluster's, each in its own store: POPULATION@STORE.
    cluster = new_store(tmp_path / "cluster-results")
    c = cluster.population("pbt_a")  # the same name, another population
    cluster.trial(c, "PPO_00000", metrics={SCORE_METRIC: [50, 60], STEPS_METRIC: [100, 200]})
    png = tmp_path / "two-stores.png"
    args = ["compare", "pbt_a", f"pbt_a@{cluster.uri}", "--store", two_populations.uri]
    assert main([*args, "-o", str(png), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [(p["population"], p["store"]) for p in found] == [
        ("pbt_a", two_populations.uri),
        ("pbt_a", cluster.uri),
    ]
    assert found[1]["curve"] == [[100, 50.0], [200, 60.0]]
    assert main([*args, "-o", str(png)]) == 0
    out = capsys.readouterr().out
    assert "store" in out.splitlines()[1]  # the table says which store each row came from
    assert cluster.uri in out
    # A results folder names its store as --store does; the same population twice is not.
    folder = tmp_path / "cluster-results"
    assert (
        main(
            [
                "compare",
                "pbt_a@" + str(folder),
                "asha_b",
                "--store",
                two_populations.uri,
                "-o",
                str(png),
            ]
        )
        == 0
    )
    capsys.readouterr()
    same = ["compare", "pbt_a", f"pbt_a@{two_populations.uri}", "--store", two_populations.uri]
    assert main([*same, "-o", str(png)]) == 2
    assert "same population" in capsys.readouterr().err


def test_wall_clock_curves_and_each_members_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = new_store(tmp_path / "results")
    started = 1_700_000_000_000
    population = store.population("timed", start_ms=started)
    # Member 0 reaches 30 at 20 s; member 1 reaches 40 at 45 s but 25 already at 10 s.
    logged = {
        "PPO_00000": [(10, 5.0, 100), (20, 30.0, 200)],
        "PPO_00001": [(10, 25.0, 150), (45, 40.0, 250)],
    }
    for name, points in logged.items():
        trial = store.trial(population, name)
        for step, (seconds, score, steps) in enumerate(points, 1):
            at = started + seconds * 1000
            store.client.log_metric(trial, SCORE_METRIC, score, timestamp=at, step=step)
            store.client.log_metric(trial, STEPS_METRIC, steps, timestamp=at, step=step)
    png = tmp_path / "wall.png"
    args = ["compare", "timed", "--store", store.uri, "-o", str(png)]
    assert main([*args, "--x-axis", "wall-clock", "--members", "--json"]) == 0
    (found,) = json.loads(capsys.readouterr().out)
    assert found["wall_curve"] == [[10.0, 25.0], [20.0, 30.0], [45.0, 40.0]]
    assert found["curve"] == [[100, 5.0], [150, 25.0], [200, 30.0], [250, 40.0]]
    assert found["members"] == {
        "PPO_00000": [[100, 5.0], [200, 30.0]],
        "PPO_00001": [[150, 25.0], [250, 40.0]],
    }
    assert found["wall_members"]["PPO_00001"] == [[10.0, 25.0], [45.0, 40.0]]
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (1300, 500)
