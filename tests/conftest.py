"""Shared test settings: the tiers' markers, Hypothesis in CI, Ray between modules, and
the PBT population several integration tests share."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import settings

# CI runs the same examples every time (a red build must be reproducible);
# developers get fresh examples on each run.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# The suite's tiers are its folders; what a folder's tests need is marked here, on every
# test in it (pyproject.toml registers the markers). `make test-<folder>` runs one tier,
# `-m "not slow"` leaves out every test that starts Ray, trains or runs a script end to
# end, `-m "not browser"` those that need Chromium.
TIER_MARKERS: dict[str, tuple[str, ...]] = {
    "unit": (),  # no Ray, no training
    "sim_ext": (),  # the C++ environments
    "deploy": (),  # the KubeRay manifests, no cluster
    "docs": (),  # the documentation site and the examples on its pages
    "integration": ("ray", "slow"),  # a local Ray, training
    "cli": ("ray", "slow"),  # `workbench run` end to end
    "cluster": ("ray", "cluster", "slow"),  # a two-node Ray cluster on loopback
    "browser": ("browser", "slow"),  # headless Chromium
    "benchmarks": ("slow",),  # the benchmark scripts, run on a tiny budget
}
TESTS = Path(__file__).parent


# Under pytest-xdist (`make test`: -n 2 --dist loadfile) a test file runs whole on one
# worker, so its module fixtures (a Ray, a store) are made once. The files that use the
# shared PBT population below run on one worker too: each worker would train its own.
SHARED_POPULATION_SCOPE = "pbt_population"
SHARED_POPULATION_FILES = frozenset(
    path.relative_to(TESTS.parent).as_posix()
    for path in TESTS.rglob("test_*.py")
    if "pbt_population" in path.read_text()
)


def _start_order(item: pytest.Item) -> int:
    """The longest work first: the files sharing the PBT population (the largest unit of
    work), then the other slow files, then the quick ones. The workers share files out in
    this order, so the seconds-long quick files fill in at the end, and neither worker is
    left alone with a minutes-long file while the other idles."""
    if item.nodeid.split("::", 1)[0] in SHARED_POPULATION_FILES:
        return 0
    return 1 if item.get_closest_marker("slow") else 2


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if TESTS not in item.path.parents:
            continue  # a test from a path outside tests/
        folder = item.path.relative_to(TESTS).parts[0]
        for marker in TIER_MARKERS.get(folder, ()):
            item.add_marker(marker)
    items.sort(key=_start_order)  # stable: a file's tests stay together and in order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    # In the order collected (above), not pytest-xdist's default of the files with the
    # most tests first, which left the slow files of one or two tests to the end.
    config.option.loadscopereorder = False

    class ByFile(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return SHARED_POPULATION_SCOPE if module in SHARED_POPULATION_FILES else module

    return ByFile(config, log)


@pytest.fixture(autouse=True)
def _terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """The width the tables fit, the same for every test however the suite runs: the
    workbench's own fallback (100 columns, no terminal) unless a test sets its own.
    Without it the width was the caller's: an 80-column terminal, or pytest-xdist's
    workers (which export COLUMNS=80), dropped table columns some tests read."""
    monkeypatch.setenv("COLUMNS", "100")


@pytest.fixture(autouse=True, scope="module")
def _no_ray_left_running() -> Iterator[None]:
    """A module that leaves Ray initialized (workbench.launch.run starts one and, as a
    CLI would, leaves it to the process's end) must not hand it to the next module,
    whose own ray.init would then fail."""
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="session")
def pbt_population(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """One real PBT population, shared by the tests whose subject it is (its MLflow
    record, its lineage, its exploits' hyperparameters, the schedule exported from it):
    four PPO trials on sim_ext CartPole, three searched values with resampling,
    synchronous PBT deciding at iterations 2 and 4 (so the exploits are certain: the
    bottom two clone the top two each time), a checkpoint every iteration with the
    three PBT needs kept, the probe learner reporting what each iteration's first gradient step
    used, tracked in an sqlite MLflow store.
    """
    import ray

    import tests.support.probes as probes
    from tests.support.experiments import PBT_POPULATION, write_experiment
    from workbench.experiment.resolve import load_and_resolve
    from workbench.run.launch import run

    root = tmp_path_factory.mktemp("pbt_population")
    data = {**PBT_POPULATION, "storage": str(root / "results")}
    resolved = load_and_resolve(write_experiment(root / "pbt.yaml", data, sort_keys=True))
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(probes)  # Ray workers cannot import tests/
    try:
        summary = run(
            resolved,
            configure=lambda c: c.learners(learner_class=probes.ProbeLearner),
            progress_interval_s=1e9,
        )
    finally:
        if started:
            ray.shutdown()
    return SimpleNamespace(root=root, resolved=resolved, summary=summary)
