"""Headless PNG plots: valid files, empty inputs, and what the figures hold."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import pytest
from matplotlib.text import Annotation

from tests.support.lineage import FINAL, RECORDS, TRIALS
from workbench.analysis.lineage import ancestry
from workbench.analysis.plots import (
    _curves_figure,
    _lineage_figure,
    _schedule_figure,
    learning_curves,
    lineage_tree,
    schedules,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _check_png(path: Path, expected: Path) -> tuple[int, int]:
    assert path == expected
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[2] in (3, 4)
    height, width = image.shape[:2]
    assert 150 <= height <= 2000 and 300 <= width <= 2000
    return height, width


def test_learning_curves_png(tmp_path: Path) -> None:
    curves = {
        f"PPO_{i}": [(1000.0 * step, float(i * step)) for step in range(20)] for i in range(4)
    }
    out = learning_curves(curves, tmp_path / "sub" / "curves.png", title="t", highlight="PPO_2")
    _check_png(out, tmp_path / "sub" / "curves.png")


def test_learning_curves_highlight_and_legend_outside_for_many_trials() -> None:
    curves = {f"PPO_{i}": [(float(x), float(i)) for x in range(5)] for i in range(12)}
    figure = _curves_figure(curves, title="many", highlight="PPO_3")
    ax = figure.axes[0]
    widths = {line.get_label(): line.get_linewidth() for line in ax.get_lines()}
    assert len(widths) == 12
    assert widths["PPO_3 (best)"] > max(w for label, w in widths.items() if "best" not in label)
    assert ax.get_legend() is None and len(figure.legends) == 1  # beside the axes
    assert _curves_figure(dict(list(curves.items())[:3]), title="few").axes[0].get_legend()


def test_empty_inputs_still_give_pngs(tmp_path: Path) -> None:
    _check_png(learning_curves({}, tmp_path / "c.png", title="t"), tmp_path / "c.png")
    _check_png(learning_curves({"x": []}, tmp_path / "c2.png", title="t"), tmp_path / "c2.png")
    _check_png(lineage_tree({}, [], tmp_path / "l.png"), tmp_path / "l.png")
    _check_png(schedules({}, tmp_path / "s.png", title="t"), tmp_path / "s.png")
    texts = [t.get_text() for t in _lineage_figure(TRIALS, []).axes[0].texts]
    assert "no exploits yet" in texts
    assert "no results yet" in [t.get_text() for t in _curves_figure({}, title="t").axes[0].texts]


def test_lineage_png_grows_with_the_population(tmp_path: Path) -> None:
    small = _check_png(
        lineage_tree(TRIALS, RECORDS, tmp_path / "l.png", best="d"), tmp_path / "l.png"
    )
    many = {f"t{i}": (f"PPO_{i:05d}", 40) for i in range(16)}
    big = _check_png(lineage_tree(many, [], tmp_path / "l16.png"), tmp_path / "l16.png")
    assert big[0] > small[0]


@pytest.mark.parametrize("best", [None, "d"])
def test_lineage_figure_has_a_lane_per_trial_and_an_arrow_per_exploit(best: str | None) -> None:
    ax = _lineage_figure(TRIALS, RECORDS, best=best).axes[0]
    labels = [label.get_text() for label in ax.get_yticklabels()]
    expected = ["PPO_A", "PPO_B", "PPO_C", "PPO_D"]
    assert labels == [n + (" (best)" if n == "PPO_D" and best else "") for n in expected]
    arrows = [t for t in ax.texts if isinstance(t, Annotation) and t.arrow_patch is not None]
    assert len(arrows) == len(RECORDS)
    # Arrows go from (donor's iteration, donor's lane) to (target's iteration, its lane).
    ends = sorted((a.xyann, a.xy) for a in arrows)
    assert ((4, 3), (12, 2)) in ends  # seq 2: c <- d@4, lanes a=0 .. d=3
    thick = [line for line in ax.get_lines() if line.get_gid() == "ancestry"]
    if best is None:
        assert thick == []
    else:
        spans = sorted((tuple(line.get_xdata()), tuple(line.get_ydata())) for line in thick)
        expected_spans = sorted(
            ((s.first_iteration, s.last_iteration), (lane, lane))
            for s in ancestry(RECORDS, best, FINAL)
            for lane in ["abcd".index(s.trial_id)]
        )
        assert spans == expected_spans
        assert len(spans) == 4


def test_lineage_figure_knows_trials_only_the_records_name() -> None:
    ax = _lineage_figure({"a": ("PPO_A", 30)}, RECORDS).axes[0]
    assert [label.get_text() for label in ax.get_yticklabels()] == [
        "PPO_A",
        "PPO_B",
        "PPO_C",
        "PPO_D",
    ]


def test_schedule_figure_scales_and_categories(tmp_path: Path) -> None:
    schedule = {
        "lr": [(1, 1e-4), (9, 2e-3), (17, 1e-2)],
        "gamma": [(1, 0.99), (17, 0.95)],
        "optimizer": [(1, "adam"), (9, "sgd"), (17, "adam")],
    }
    figure = _schedule_figure(schedule, title="t", exploits=[9, 17])
    lr, gamma, optimizer = figure.axes
    assert lr.get_yscale() == "log" and gamma.get_yscale() == "linear"
    assert [t.get_text() for t in optimizer.get_yticklabels()] == ["adam", "sgd"]
    assert [lr.get_ylabel(), gamma.get_ylabel(), optimizer.get_ylabel()] == list(schedule)
    for ax in figure.axes:
        dotted = [line for line in ax.get_lines() if line.get_gid() == "exploit"]
        assert sorted(line.get_xdata()[0] for line in dotted) == [9, 17]
    # The last values run on to the final iteration, not just to the last change point.
    (steps,) = [line for line in lr.get_lines() if line.get_gid() == "steps"]
    assert steps.get_xdata()[-1] == 17
    figure = _schedule_figure(schedule, title="t", exploits=[9, 17], last_iteration=40)
    (steps,) = [ln for ln in figure.axes[0].get_lines() if ln.get_gid() == "steps"]
    assert list(steps.get_xdata()) == [1, 9, 17, 40]
    assert list(steps.get_ydata()) == [1e-4, 2e-3, 1e-2, 1e-2]
    out = schedules(schedule, tmp_path / "s.png", title="t", exploits=[9, 17], last_iteration=40)
    small = _check_png(out, tmp_path / "s.png")
    one = _check_png(
        schedules({"lr": [(1, 0.1)]}, tmp_path / "1.png", title="t"), tmp_path / "1.png"
    )
    assert small[0] > one[0]
