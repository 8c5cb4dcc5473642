"""Resource topology without Ray: the resources section, the bundles RLlib requests, how
they fit on clusters, `workbench plan` and the pre-flight's decisions (tests/
integration/test_plan_integration.py and tests/cluster/test_cluster.py check the same numbers
on real Ray)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

import workbench.plan.preflight as plan_module
from tests.support.configs import config_of_file
from tests.support.experiments import tiny_ppo, write_experiment
from workbench.cli import main
from workbench.errors import ExperimentError
from workbench.experiment.loading import json_schema
from workbench.experiment.resolve import load_and_resolve
from workbench.experiment.resources_section import ResourcesSection
from workbench.plan.capacity import Plan, make_plan, what_would_fit
from workbench.plan.preflight import preflight
from workbench.plan.resources import (
    Cluster,
    Node,
    TrialRequest,
    concurrent_trials,
    parse_cluster,
    place,
    trial_request,
    unfit_reasons,
)
from workbench.plan.throughput import GPU_LEARNER_S_PER_MINIBATCH, GPU_LEARNER_S_PER_SAMPLE
from workbench.trial.config import build_config

ROOT = Path(__file__).resolve().parents[2]
GPU_LEARNER: dict[str, Any] = {
    "cpus_main": 1,
    "num_learners": 1,
    "gpus_per_learner": 1,
    "env_runners": {"count": 3, "cpus_each": 1},
}


def experiment(tmp_path: Path, resources: dict[str, Any] | None = None, **top: Any) -> Path:
    topology = {"name": "topology", "stop": {"iterations": 3}, "population": 4}
    data = tiny_ppo(tmp_path, **{**topology, **top})
    if resources is not None:
        data["resources"] = resources
    return write_experiment(tmp_path, data)


def resolved(tmp_path: Path, resources: dict[str, Any] | None = None, **top: Any) -> Any:
    return load_and_resolve(experiment(tmp_path, resources, **top), check_results=False)


def cluster(*specs: str) -> Cluster:
    return parse_cluster(list(specs))


def bundles(request: TrialRequest) -> list[dict[str, float]]:
    return [b.resources for b in request.bundles]


# --- the resources section ---------------------------------------------------------------


def test_the_older_flat_keys_and_a_runner_count_still_load() -> None:
    old = ResourcesSection.model_validate(
        {"cpus_main": 0.5, "env_runners": 2, "envs_per_runner": 16, "cpus_per_runner": 0.5}
    )
    new = ResourcesSection.model_validate(
        {"cpus_main": 0.5, "env_runners": {"count": 2, "envs_per_runner": 16, "cpus_each": 0.5}}
    )
    assert old == new
    # What a run saves (and `workbench resume` reads back) is the block form.
    assert ResourcesSection.model_validate(new.model_dump()) == new
    assert new.model_dump()["env_runners"] == {
        "count": 2,
        "cpus_each": 0.5,
        "envs_per_runner": 16,
        "vectorize": "auto",
    }


@pytest.mark.parametrize(
    ("resources", "field", "fragments"),
    [
        (
            {"envs_per_runner": 4, "env_runners": {"envs_per_runner": 8}},
            "resources",
            ("env_runners.envs_per_runner is 8", "says 4", "keep env_runners.envs_per_runner"),
        ),
        (
            {"num_learners": 2, "gpus_per_learner": 0.5},
            "resources",
            ("num_learners 2 at gpus_per_learner 0.5", "NCCL", "whole GPUs"),
        ),
        ({"gpus_per_learner": 1.5}, "resources", ("gpus_per_learner 1.5", "use 1 or 2")),
        (
            {"num_learners": 1, "cpus_per_learner": 0},
            "resources",
            ("cpus_per_learner 0 with gpus_per_learner 0",),
        ),
        (
            {"placement_strategy": "pack"},
            "resources.placement_strategy",
            ("'pack'", "'PACK'", "'STRICT_SPREAD'"),
        ),
        ({"no_gpu": "cpu"}, "resources.no_gpu", ("'cpu'", "'cpu_fallback'")),
        (
            {"env_runners": {"count": 2, "cpu_each": 1}},
            "resources.env_runners.cpu_each",
            ("did you mean 'cpus_each'?",),
        ),
        ({"env_runners": {"vectorize": "threads"}}, "resources.env_runners.vectorize", ("'sync'",)),
    ],
    ids=[
        "old and new spelling disagree",
        "learners sharing a GPU",
        "fraction above one GPU",
        "a learner with nothing",
        "strategy case",
        "no_gpu value",
        "unknown runner key",
        "vectorize value",
    ],
)
def test_bad_resources_are_refused_with_the_value_and_what_is_valid(
    tmp_path: Path, resources: dict[str, Any], field: str, fragments: tuple[str, ...]
) -> None:
    with pytest.raises(ExperimentError) as info:
        resolved(tmp_path, resources)
    problems = [p for p in info.value.problems if p.field == field]
    assert problems, str(info.value)
    assert all(f in problems[0].message for f in fragments), problems[0].message


def test_the_json_schema_accepts_both_spellings_and_rejects_unknown_runner_keys() -> None:
    schema = json_schema()
    base = yaml.safe_load((ROOT / "experiments" / "cartpole_pbt_gpu.yaml").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors(base)) == []
    base["resources"] = {"env_runners": 2, "envs_per_runner": 4, "cpus_per_runner": 0.5}
    assert list(validator.iter_errors(base)) == []
    base["resources"] = {"env_runners": {"count": 2, "cpu_each": 1}}
    assert list(validator.iter_errors(base))


def test_the_algorithm_config_carries_the_section(tmp_path: Path) -> None:
    config = config_of_file(
        experiment(
            tmp_path,
            {
                **GPU_LEARNER,
                "placement_strategy": "SPREAD",
                "env_runners": {"count": 2, "cpus_each": 0.5, "envs_per_runner": 3},
            },
        )
    )
    assert (config.num_env_runners, config.num_cpus_per_env_runner) == (2, 0.5)
    assert (config.num_envs_per_env_runner, config.gym_env_vectorize_mode) == (
        3,
        "vector_entry_point",
    )
    assert (config.num_learners, config.num_gpus_per_learner) == (1, 1)
    assert (config.num_cpus_per_learner, config.placement_strategy) == ("auto", "SPREAD")
    sync = config_of_file(experiment(tmp_path, {"env_runners": {"vectorize": "sync"}}))
    assert sync.gym_env_vectorize_mode == "sync"


# --- bundles: RLlib's own ------------------------------------------------------------------


@pytest.mark.parametrize(
    "resources",
    [
        {"cpus_main": 0.5, "cpus_per_learner": 0.5},
        GPU_LEARNER,
        {"cpus_main": 2, "gpus_per_learner": 0.25, "env_runners": 2},
        {"num_learners": 2, "gpus_per_learner": 1, "cpus_per_learner": 2, "env_runners": 1},
        {"num_learners": 1, "env_runners": {"count": 4, "cpus_each": 0.25}},
    ],
    ids=["in-process", "gpu learner", "fractional gpu", "two learners", "cpu learner"],
)
def test_the_bundles_are_exactly_what_rllib_requests(
    tmp_path: Path, resources: dict[str, Any]
) -> None:
    config = config_of_file(experiment(tmp_path, resources))
    factory = config.algo_class.default_resource_request(config)
    request = trial_request(config)
    assert bundles(request) == [{k: v for k, v in b.items() if v} for b in factory.bundles]
    assert request.strategy == factory.strategy
    assert request.totals == {k: v for k, v in factory.required_resources.items() if v}


def test_the_bundles_are_named_by_what_they_hold(tmp_path: Path) -> None:
    request = trial_request(config_of_file(experiment(tmp_path, GPU_LEARNER)))
    assert [(b.role, b.resources) for b in request.bundles] == [
        ("main process", {"CPU": 1.0}),
        ("env runner 1", {"CPU": 1.0}),
        ("env runner 2", {"CPU": 1.0}),
        ("env runner 3", {"CPU": 1.0}),
        ("learner 1", {"GPU": 1.0}),  # RLlib books a GPU learner at 0 CPUs ('auto')
    ]
    local = trial_request(config_of_file(experiment(tmp_path, {"gpus_per_learner": 0.5})))
    assert [(b.role, b.resources) for b in local.bundles] == [
        ("main process + learner", {"CPU": 1.0, "GPU": 0.5})
    ]


# --- fitting -------------------------------------------------------------------------------


def request(strategy: str, *shapes: dict[str, float]) -> TrialRequest:
    from workbench.plan.resources import Bundle

    return TrialRequest(tuple(Bundle(f"b{i}", dict(s)) for i, s in enumerate(shapes)), strategy)


CPU1 = {"CPU": 1.0}
GPU1 = {"GPU": 1.0}


def test_cluster_specs_are_nodes() -> None:
    parsed = parse_cluster(["cpus=4,gpus=1,nodes=2", "cpus=8,node_b=1"])
    assert [n.resources for n in parsed.nodes] == [
        {"CPU": 4.0, "GPU": 1.0},
        {"CPU": 4.0, "GPU": 1.0},
        {"CPU": 8.0, "node_b": 1.0},
    ]
    assert parsed.totals == {"CPU": 16.0, "GPU": 2.0, "node_b": 1.0}
    for bad, fragment in [
        ("cpus=four", "'cpus=four' is not name=number"),
        ("cpus=4,nodes=1.5", "nodes=1.5 is not a whole number"),
        ("gpus=0", "a node with no resources"),
        ("cpus=-1", "is not name=number"),
    ]:
        with pytest.raises(ValueError, match=fragment):
            parse_cluster([bad])


def test_one_gpu_learner_on_four_cpus_and_one_gpu_runs_one_trial_at_a_time() -> None:
    one = request("PACK", CPU1, CPU1, CPU1, CPU1, GPU1)
    fit = concurrent_trials(one, cluster("cpus=4,gpus=1"), limit=4)
    assert fit.concurrent == 1
    assert fit.limited_by == "CPU: 4 in the cluster, 4 per trial"
    quarter = request("PACK", CPU1, {"GPU": 0.25})
    fit = concurrent_trials(quarter, cluster("cpus=4,gpus=1"), limit=8)
    assert fit.concurrent == 4 and fit.limited_by is not None and fit.limited_by.startswith("CPU")
    assert concurrent_trials(quarter, cluster("cpus=8,gpus=1"), limit=8).concurrent == 4
    assert concurrent_trials(quarter, cluster("cpus=8,gpus=1"), limit=3).limited_by is None


def test_strategies_place_bundles_as_ray_would() -> None:
    two_nodes = [{"CPU": 2.0}, {"CPU": 2.0}]
    group = [CPU1, CPU1]
    assert place(request("PACK", *group), two_nodes) == [0, 0]
    assert place(request("STRICT_PACK", *group), two_nodes) == [0, 0]
    assert sorted(place(request("SPREAD", *group), two_nodes) or []) == [0, 1]
    assert sorted(place(request("STRICT_SPREAD", *group), two_nodes) or []) == [0, 1]
    three = [CPU1, CPU1, CPU1]
    assert place(request("STRICT_PACK", *three), two_nodes) is None
    assert place(request("STRICT_SPREAD", *three), two_nodes) is None
    assert place(request("PACK", *three), two_nodes) is not None  # spans when it must
    # SPREAD puts the big bundles on different nodes first.
    spread = place(request("SPREAD", {"CPU": 0.5}, CPU1, CPU1), [{"CPU": 2.0}, {"CPU": 3.0}])
    assert spread is not None and spread[1] != spread[2]


def test_fragmentation_is_named_when_the_totals_would_hold_more() -> None:
    # Three 4-CPU nodes hold 12 CPUs, four trials of CPU 3 by the totals; but a STRICT_PACK
    # trial needs its 3 CPUs on one node, and each node has 1 left after one trial.
    fit = concurrent_trials(request("STRICT_PACK", CPU1, CPU1, CPU1), cluster("cpus=4,nodes=3"), 9)
    assert fit.concurrent == 3 and fit.per_resource == {"CPU": 4}
    assert fit.limited_by is not None and fit.limited_by.startswith(
        "node boundaries: the totals hold 4 but the bundles of one more trial do not fit"
    )
    # PACK may span nodes: the fourth trial takes the three leftover CPUs.
    assert (
        concurrent_trials(
            request("PACK", CPU1, CPU1, CPU1), cluster("cpus=4,nodes=3"), 9
        ).concurrent
        == 4
    )


def test_unfit_reasons_carry_the_numbers() -> None:
    node = cluster("cpus=4,gpus=1")
    assert unfit_reasons(request("PACK", CPU1, {"GPU": 2.0}), node) == [
        "one trial needs GPU 2 and the cluster has 1 in total"
    ]
    (reason,) = unfit_reasons(request("STRICT_PACK", *[CPU1] * 5), cluster("cpus=4,nodes=2"))
    assert reason == (
        "STRICT_PACK puts all 5 bundles (CPU 5) on one node, and no node has that much "
        "(largest: CPU 4)"
    )
    (reason,) = unfit_reasons(request("STRICT_SPREAD", *[CPU1] * 3), cluster("cpus=4,nodes=2"))
    assert reason.endswith("each of the 3 bundles on a different node, and the cluster has 2 nodes")
    (reason,) = unfit_reasons(request("PACK", {"CPU": 6.0}), cluster("cpus=4,nodes=2"))
    assert reason == "the b0 bundle (CPU 6) fits on no node (largest: CPU 4)"
    assert unfit_reasons(request("PACK", CPU1), node) == []


# --- plans -----------------------------------------------------------------------------------


def test_the_plan_of_a_gpu_learner_on_four_cpus_and_one_gpu(tmp_path: Path) -> None:
    plan = make_plan(resolved(tmp_path, GPU_LEARNER), cluster("cpus=4,gpus=1"))
    assert plan.fits and not plan.cpu_fallback
    assert bundles(plan.request) == [CPU1, CPU1, CPU1, CPU1, GPU1]
    assert (plan.trials, plan.concurrent, plan.waves) == (4, 1, 4)
    text = "\n".join(plan.lines())
    assert "strategy PACK" in text and "per trial" in text and "CPU 4, GPU 1" in text
    assert "At once: 1 (limited by CPU: 4 in the cluster, 4 per trial)" in text
    assert "Queue: 4 waves (ceil(4 / 4))" not in text and "Queue: 4 waves (ceil(4 / 1))" in text


def test_population_grid_and_max_concurrent_set_the_waves(tmp_path: Path) -> None:
    space = {"params": {"gamma": {"grid": [0.9, 0.95, 0.99]}}}
    plan = make_plan(
        resolved(tmp_path, {"cpus_main": 1}, search_space=space, population=2, max_concurrent=4),
        cluster("cpus=16"),
    )
    assert (plan.trials, plan.concurrent, plan.capacity, plan.waves) == (6, 4, 16, 2)
    assert "Trials: 6 (population 2 x 3 grid points, max_concurrent 4)" in plan.lines()


def test_pbt_with_fewer_slots_than_members_says_they_take_turns(tmp_path: Path) -> None:
    plan = make_plan(
        resolved(
            tmp_path,
            {"cpus_main": 1},
            scheduler={"type": "pbt", "perturbation_interval": 4},
            search_space={"params": {"lr": {"loguniform": [1e-4, 1e-2]}}},
        ),
        cluster("cpus=2"),
    )
    assert plan.concurrent == 2
    assert any("members take turns, pausing every 4 iterations" in n for n in plan.notes)


@pytest.mark.parametrize(
    ("resources", "spec", "field", "fragments", "fixes"),
    [
        (
            {**GPU_LEARNER, "gpus_per_learner": 2},
            "cpus=8,gpus=1",
            "resources.gpus_per_learner",
            ("needs GPU 2 and the cluster has 1 in total", "learner GPU 2"),
            ["resources.gpus_per_learner: 1"],
        ),
        (
            {**GPU_LEARNER, "placement_strategy": "STRICT_PACK"},
            "cpus=2,gpus=1,nodes=2",
            "resources.placement_strategy",
            ("STRICT_PACK puts all 5 bundles (CPU 4, GPU 1) on one node", "largest: CPU 2, GPU 1"),
            [
                "resources.placement_strategy: PACK",
                "resources.env_runners.count: 1",
                "resources.env_runners.cpus_each: 0.25",
            ],
        ),
        (
            {**GPU_LEARNER, "placement_strategy": "STRICT_SPREAD"},
            "cpus=4,gpus=1,nodes=3",
            "resources.placement_strategy",
            ("each of the 5 bundles on a different node, and the cluster has 3 nodes",),
            ["resources.placement_strategy: SPREAD", "resources.env_runners.count: 1"],
        ),
        (
            GPU_LEARNER,
            "cpus=16",
            "resources.gpus_per_learner",
            ("needs GPU 1 and the cluster has 0 in total",),
            ["resources.no_gpu: cpu_fallback"],
        ),
    ],
    ids=["more gpus than the cluster", "strict pack", "strict spread", "no gpu"],
)
def test_an_unfit_plan_says_why_with_the_numbers_and_what_would_fit(
    tmp_path: Path,
    resources: dict[str, Any],
    spec: str,
    field: str,
    fragments: tuple[str, ...],
    fixes: list[str],
) -> None:
    res = resolved(tmp_path, resources)
    plan = make_plan(res, cluster(spec))
    assert not plan.fits and plan.concurrent == 0
    (problem,) = plan.problems
    assert problem.field == field and problem.file == str(res.file)
    for fragment in (*fragments, f"--cluster {spec} [", "PENDING forever"):
        assert fragment in problem.message, problem.message
    assert f"It would fit with {fixes[0]}" in problem.message
    config = build_config(res.experiment, res.defaults)
    assert what_would_fit(res.experiment, res.file, config, plan.request, cluster(spec)) == fixes


@pytest.mark.parametrize(
    ("resources", "spec"),
    [
        ({**GPU_LEARNER, "env_runners": {"count": 6, "cpus_each": 1}}, "cpus=3,gpus=1"),
        ({**GPU_LEARNER, "placement_strategy": "STRICT_SPREAD"}, "cpus=1,gpus=1,nodes=4"),
        ({**GPU_LEARNER, "num_learners": 2, "gpus_per_learner": 4}, "cpus=8,gpus=2,nodes=2"),
        (GPU_LEARNER, "cpus=2"),
    ],
    ids=["too many runners", "strict spread", "gpus per learner", "no gpu, few cpus"],
)
def test_every_suggested_fix_fits_when_written_into_the_file(
    tmp_path: Path, resources: dict[str, Any], spec: str
) -> None:
    path = experiment(tmp_path, resources)
    plan = make_plan(load_and_resolve(path, check_results=False), cluster(spec))
    assert not plan.fits
    res = load_and_resolve(path, check_results=False)
    config = build_config(res.experiment, res.defaults)
    fixes = what_would_fit(res.experiment, path, config, plan.request, cluster(spec))
    assert fixes, plan.problems
    for fix in fixes:
        # Each one reads as `field: value [and field: value]`, what a user would write.
        overrides = [part.replace(": ", "=", 1) for part in fix.split(" and ")]
        fixed = make_plan(load_and_resolve(path, overrides, check_results=False), cluster(spec))
        assert fixed.fits, (fix, fixed.problems)


def test_without_a_gpu_cpu_fallback_plans_cpu_learners_and_says_so(tmp_path: Path) -> None:
    plan = make_plan(
        resolved(tmp_path, {**GPU_LEARNER, "no_gpu": "cpu_fallback"}), cluster("cpus=8")
    )
    assert plan.fits and plan.cpu_fallback
    assert bundles(plan.request) == [CPU1, CPU1, CPU1, CPU1, CPU1]  # the learner: CPU 1
    (warning,) = plan.warnings
    assert warning.startswith("NO GPU on --cluster cpus=8: the experiment asks for GPU 1")
    assert f"WARNING: {warning}" in plan.lines()


def test_vector_entry_point_needs_an_env_with_a_vector_class(tmp_path: Path) -> None:
    res = resolved(
        tmp_path,
        {"env_runners": {"vectorize": "vector_entry_point"}},
        env={"id": "Pendulum-v1"},
    )
    plan = make_plan(res, cluster("cpus=4"))
    (problem,) = plan.problems
    assert problem.field == "resources.env_runners.vectorize"
    assert "Pendulum-v1 has none" in problem.message


def test_sampling_vs_learning_is_an_estimate_that_says_so(tmp_path: Path) -> None:
    one_slow_runner: dict[str, Any] = {
        "resources": {"cpus_main": 1, "env_runners": {"count": 1, "envs_per_runner": 1}},
        "training": {"num_epochs": 1, "minibatch_size": 512, "train_batch_size_per_learner": 512},
    }
    # RLlib's own runner: the runner the documented rates were measured with.
    starved = make_plan(
        resolved(tmp_path, env_runner="rllib", **one_slow_runner), cluster("cpus=4")
    )
    rate = starved.throughput
    assert rate is not None and not rate.measured and not rate.sampling_floor
    assert rate.per_runner == pytest.approx(900.0)  # the documented N=1 vector_entry_point rate
    ratio = rate.ratio
    assert ratio is not None and ratio[1] < 1
    text = "\n".join(starved.lines())
    assert "estimate, not measured" in text and "sampling cannot keep the learner busy" in text
    # A faster runner makes the documented rate a floor, and the verdict says so.
    fast = make_plan(resolved(tmp_path, env_runner="fast", **one_slow_runner), cluster("cpus=4"))
    assert fast.throughput is not None and fast.throughput.sampling_floor
    assert "sampling may not keep the learner busy (the sampling figure is a floor" in "\n".join(
        fast.lines()
    )
    fed = make_plan(
        resolved(
            tmp_path,
            {"env_runners": {"count": 4, "envs_per_runner": 64}},
            training={"num_epochs": 20, "minibatch_size": 64},
        ),
        cluster("cpus=8"),
    )
    assert fed.throughput is not None and fed.throughput.per_runner == pytest.approx(22.2e3)
    assert "sampling keeps up; the learner is the slower half" in "\n".join(fed.lines())
    # A GPU learner is estimated from the figure measured on H200 nodes, and forecast.
    gpu = make_plan(resolved(tmp_path, GPU_LEARNER), cluster("cpus=4,gpus=1"))
    assert gpu.throughput is not None and gpu.throughput.ratio is not None
    assert gpu.throughput.learner_costs == (GPU_LEARNER_S_PER_SAMPLE, GPU_LEARNER_S_PER_MINIBATCH)
    assert any("on GPU" in d and "H200" in d for d in gpu.throughput.detail)
    assert gpu.forecast is not None and gpu.forecast.iterations_per_s > 0
    # On the small-env model the plan says a CPU core was measured faster; not on a wide one.
    assert any("64x64 model a GPU learner was measured slower" in n for n in gpu.notes)
    wide = make_plan(
        resolved(tmp_path, GPU_LEARNER, model={"fcnet_hiddens": [1024, 1024]}),
        cluster("cpus=4,gpus=1"),
    )
    assert not any("measured slower" in n for n in wide.notes)
    # The same trial on CPU: the documented CPU learner is the cheaper per minibatch.
    cpu = make_plan(resolved(tmp_path, {**GPU_LEARNER, "gpus_per_learner": 0}), cluster("cpus=4"))
    assert cpu.throughput is not None and cpu.throughput.learner_low is not None
    assert gpu.throughput.learner_low is not None
    assert cpu.throughput.learner_low > gpu.throughput.learner_low


# --- the command ---------------------------------------------------------------------------


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_plan_prints_the_bundles_and_the_queue(tmp_path: Path) -> None:
    path = experiment(tmp_path, GPU_LEARNER)
    code, out, _ = run_cli("plan", str(path), "--cluster", "cpus=4,gpus=1")
    assert code == 0
    assert "bundle 4   learner 1     GPU 1" in out
    assert "Queue: 4 waves (ceil(4 / 1))" in out
    code, out, _ = run_cli(
        "plan", str(path), "--cluster", "cpus=4,gpus=1", "--set", "population=2", "--json"
    )
    data = json.loads(out)
    assert code == 0 and data["fits"] and data["concurrent"] == 1 and data["waves"] == 2
    assert data["bundles"][-1] == {"role": "learner 1", "resources": {"GPU": 1.0}}
    assert data["per_trial"] == {"CPU": 4.0, "GPU": 1.0}
    assert data["cluster"]["totals"] == {"CPU": 4.0, "GPU": 1.0}


def test_plan_of_an_unfit_experiment_exits_2_with_the_problem(tmp_path: Path) -> None:
    path = experiment(tmp_path, {**GPU_LEARNER, "gpus_per_learner": 2})
    code, out, err = run_cli("plan", str(path), "--cluster", "cpus=8,gpus=1")
    assert code == 2
    assert "At once: none" in out
    assert f"{path}: resources.gpus_per_learner: one trial can never be placed" in err
    code, out, _ = run_cli("plan", str(path), "--cluster", "cpus=8,gpus=1", "--json")
    assert code == 2 and json.loads(out)["fits"] is False
    code, _, err = run_cli("plan", str(path), "--cluster", "cpus=lots")
    assert code == 2 and "--cluster: 'cpus=lots': 'cpus=lots' is not name=number" in err


def test_plan_without_a_cluster_uses_this_machine(tmp_path: Path) -> None:
    code, out, _ = run_cli("plan", str(experiment(tmp_path, {"cpus_main": 1})))
    assert code == 0 and "Cluster: this machine, as a local ray.init() sees it" in out


# --- the pre-flight (the live cluster replaced by numbers) ---------------------------------


def _live(monkeypatch: pytest.MonkeyPatch, *clusters: Cluster) -> list[Cluster]:
    """live_cluster answers these in turn (the last one from then on)."""
    queue = list(clusters)

    def live(address: str | None = None) -> Cluster:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    monkeypatch.setattr(plan_module, "live_cluster", live)
    return queue


def test_preflight_refuses_a_trial_that_can_never_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _live(monkeypatch, cluster("cpus=2"))
    res = resolved(tmp_path, GPU_LEARNER)
    with pytest.raises(ExperimentError) as info:
        preflight(res, build_config(res.experiment, res.defaults))
    assert info.value.exit_code == 2
    assert "needs CPU 4 and the cluster has 2 in total" in str(info.value)
    assert not res.results_dir.exists()


def test_preflight_waits_for_nodes_to_join_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _live(monkeypatch, cluster("cpus=2"), cluster("cpus=2"), cluster("cpus=4,gpus=1"))
    monkeypatch.setenv(plan_module.WAIT_ENV, "60")
    monkeypatch.setattr(plan_module.time, "sleep", lambda s: None)
    res = resolved(tmp_path, GPU_LEARNER)
    plan = preflight(res, build_config(res.experiment, res.defaults))
    assert plan.fits and plan.concurrent == 1
    captured = capsys.readouterr()
    assert captured.err.count("waiting for the cluster to grow") == 2
    assert "Plan: one trial = CPU 4, GPU 1 (5 bundles, PACK); 1 of 4 trials at once" in captured.out


def test_preflight_falls_back_to_cpu_learners_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _live(monkeypatch, cluster("cpus=8"))
    res = resolved(tmp_path, {**GPU_LEARNER, "no_gpu": "cpu_fallback"})
    config = build_config(res.experiment, res.defaults)
    plan: Plan = preflight(res, config)
    assert plan.cpu_fallback
    # The run goes on with the plan's experiment and config: CPU learners.
    assert plan.resolved is not None and plan.config is not None
    assert plan.resolved.experiment.resources.gpus_per_learner == 0
    assert plan.config.num_gpus_per_learner == 0
    assert trial_request(plan.config).totals.get("GPU", 0.0) == 0
    # Its inputs are left as they were: the pre-flight returns new ones.
    assert res.experiment.resources.gpus_per_learner == 1
    assert config.num_gpus_per_learner == 1
    assert "workbench: WARNING: NO GPU on --cluster cpus=8" in capsys.readouterr().err


def test_preflight_on_a_multi_node_cluster_checks_the_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    two = Cluster((Node("a", {"CPU": 4.0}), Node("b", {"CPU": 4.0})), "two nodes")
    _live(monkeypatch, two)
    checked: list[tuple[Path, Path]] = []

    def check_nodes(file: Path, storage: Path, cluster: Cluster) -> list[str]:
        checked.append((file, storage))
        return ["results storage X is not shared: ..."]

    monkeypatch.setattr(plan_module, "check_nodes", check_nodes)
    res = resolved(tmp_path, {"cpus_main": 1})
    preflight(res, build_config(res.experiment, res.defaults))
    assert checked == [(res.file, res.results_dir.parent)]
    assert "workbench: WARNING: results storage X is not shared" in capsys.readouterr().err


def test_the_node_check_refuses_nodes_without_the_project_and_warns_of_unshared_storage(
    tmp_path: Path,
) -> None:
    from workbench.plan.preflight import judge_nodes

    storage = tmp_path / "results"
    fine = {"sees_storage": True}
    assert judge_nodes({"a": fine, "b": fine}, file="x.yaml", storage=storage) == []
    (warning,) = judge_nodes(
        {"a": fine, "b": {"sees_storage": False}}, file="x.yaml", storage=storage
    )
    assert warning.startswith(f"results storage {storage} is not shared: 1 of 2 nodes (b)")
    assert "mount one shared volume" in warning
    (warning,) = judge_nodes({"a": fine, "b": "no answer in 120 s"}, file="x.yaml", storage=storage)
    assert warning == "node b did not take part in the pre-flight: no answer in 120 s"
    with pytest.raises(ExperimentError) as info:
        judge_nodes(
            {"a": fine, "b": {"sees_storage": True, "sim_ext": "ModuleNotFoundError: sim_ext"}},
            file="x.yaml",
            storage=storage,
        )
    assert str(info.value) == (
        "x.yaml: nodes of the cluster cannot import the project, so their trials would fail: "
        "b: sim_ext (ModuleNotFoundError: sim_ext). Install it on every node (the same image, "
        "see deploy/kuberay) or ship it with a runtime_env (see docs/resources.md, Existing "
        "clusters)"
    )
