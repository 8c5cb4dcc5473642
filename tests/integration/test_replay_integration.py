"""Schedule replay on real runs: the schedule `workbench export-schedule` writes from the
shared PBT population is the lineage's stitched schedule, and running that file trains
each iteration with its values (the scheduler and the file format without Ray:
tests/unit/test_replay.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

import tests.support.probes as probes
from workbench.cli import main
from workbench.experiment.resolve import load_and_resolve

# What ProbeLearner reports from inside the first gradient step of each iteration.
PROBED = {"lr": "probe_first_lr", "clip_param": "probe_first_clip_param"}
PROBED["entropy_coeff"] = "probe_first_entropy_coeff"


@pytest.fixture(scope="module")
def population(
    pbt_population: SimpleNamespace, local_ray: None, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """tests/conftest.py's PBT population (exploits certain, tracked in MLflow), and
    the schedules exported from it: of a trial that an exploit changed, and the best's."""
    from workbench.analysis.lineage import read_jsonl

    resolved = pbt_population.resolved
    assert pbt_population.summary.errors == 0
    records = read_jsonl(resolved.results_dir / "lineage.jsonl")
    assert records, "PBT never exploited: nothing to replay"
    # The last exploit's target: its final policy came through a change of values.
    changed = max(records, key=lambda r: r.seq).target_name
    store = pbt_population.root / "results" / "mlflow.db"
    tmp = tmp_path_factory.mktemp("replay")
    out = tmp / "replay.yaml"
    args = ["export-schedule", "pbt", "--store", str(store), "--trial", changed, "-o", str(out)]
    assert main(args) == 0
    assert (
        main(["export-schedule", "pbt", "--store", str(store), "-o", str(tmp / "best.yaml")]) == 0
    )
    return {"store": store, "trial": changed, "file": out, "best": tmp / "best.yaml"}


def test_the_exported_schedule_is_the_lineage_stitched_schedule(
    population: dict[str, Any],
) -> None:
    from workbench.analysis.histories import lineage_records, trial_ancestry
    from workbench.analysis.populations import find_population, find_trial
    from workbench.tracking.store import client_for

    uri = f"sqlite:///{population['store']}"
    client = client_for(uri)
    pop = find_population(client, "pbt", uri)
    trial = find_trial(client, population["trial"], "pbt", uri)
    records = lineage_records(client, pop)
    segments, stitched = trial_ancestry(client, pop, records, trial)
    assert len(segments) >= 2, "the trial's policy went through an exploit"

    for file in (population["file"], population["best"]):
        resolved = load_and_resolve(file, check_results=False)
        assert resolved.experiment.population == 1 and not resolved.search_space
    section = load_and_resolve(population["file"], check_results=False).experiment.scheduler
    assert section.type == "replay"
    steps = {step.iteration: step.values for step in section.schedule}
    change_points = {iteration for points in stitched.values() for iteration, _ in points}
    assert set(steps) == change_points | {1}
    assert len(steps) >= 2, "the exploit changed no value"
    for name, points in stitched.items():
        for iteration, value in points:
            assert section.values_at(iteration)[name] == pytest.approx(value, rel=1e-12)
    stop = yaml.safe_load(population["file"].read_text())["stop"]
    assert stop["iterations"] == trial.iteration == segments[-1].last_iteration


def test_running_the_exported_file_applies_each_value_from_its_iteration_on(
    population: dict[str, Any], tmp_path: Path
) -> None:
    from workbench.run.launch import run

    # Its own store: the source population's is shared with other tests.
    resolved = load_and_resolve(population["file"], [f"storage={tmp_path}"])
    section = resolved.experiment.scheduler
    assert section.type == "replay"
    summary = run(
        resolved,
        configure=lambda c: c.learners(learner_class=probes.ProbeLearner),
        progress_interval_s=1e9,
    )
    assert summary.errors == 0
    (trial_dir,) = [d for d in resolved.results_dir.iterdir() if (d / "result.json").is_file()]
    rows = [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()]
    iterations = [row["training_iteration"] for row in rows]
    assert iterations == list(range(1, resolved.experiment.stop.iterations + 1))
    changes = [s.iteration for s in section.schedule[1:]]
    assert changes and all(1 < c <= iterations[-1] for c in changes)
    for row in rows:
        wanted = section.values_at(row["training_iteration"])
        for name, probe in PROBED.items():
            # Inside the iteration's first gradient step, the restarts included.
            assert row["learners"][probe] == pytest.approx(wanted[name], rel=1e-9), (
                name,
                row["training_iteration"],
            )
            assert row["config"][name] == wanted[name]
