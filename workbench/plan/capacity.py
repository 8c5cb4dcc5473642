"""`workbench plan` and the pre-flight of `workbench run`: one trial's placement group
against a cluster, before anything starts.

A plan says what RLlib will ask Ray for per trial, how many trials fit at once on the
cluster (a live one, the numbers given, or this machine), how long the population would
queue, and whether the env runners can feed the learner. The pre-flight is the same plan
against the live cluster: a trial that can never fit (Ray would leave it PENDING forever)
is an ExperimentError with the numbers and what would fit, raised before the results
folder or Tune exist."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from workbench.errors import ExperimentError, Problem
from workbench.experiment.resolve import ResolvedExperiment
from workbench.experiment.schema import Experiment
from workbench.experiment.search_checks import grid_points
from workbench.plan.forecast_text import forecast_lines
from workbench.plan.population import Forecast, forecast_population
from workbench.plan.resources import (
    Cluster,
    MemoryFit,
    TrialRequest,
    concurrent_trials,
    fmt,
    gb,
    memory_fit,
    trial_request,
    unfit_reasons,
)
from workbench.plan.start_probe import StartProbeError, probe_process, with_process
from workbench.plan.throughput import (
    Throughput,
    _throughput_lines,
    estimate_throughput,
    probe_throughput,
    small_model_on_gpu,
)
from workbench.trial.config import build_config, with_resources_of

# Counting how many trials a cluster holds stops here (the plan says "or more").
_CAPACITY_CAP = 1000


@dataclass
class Plan:
    file: str
    algorithm: str
    env: str
    request: TrialRequest
    cluster: Cluster
    trials: int  # population x grid points
    population: int
    grid_points: int
    max_concurrent: int | None
    concurrent: int
    limited_by: str | None
    capacity: int  # trials the cluster holds at once, whatever the population
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # said loudly (stderr in the CLI)
    notes: list[str] = field(default_factory=list)
    cpu_fallback: bool = False
    throughput: Throughput | None = None
    memory: MemoryFit | None = None  # None: the cluster declares no memory
    forecast: Forecast | None = None  # None: the iteration's cost is not known
    # Node index of every bundle of every trial placed at once (an estimate of Ray's choice
    # among equal nodes; exact in how many bundles each node can hold).
    placements: list[list[int]] = field(default_factory=list)
    # What the run should use: the experiment and RLlib config the plan was made for (the
    # CPU fallback's where the plan fell back to CPU learners).
    resolved: ResolvedExperiment | None = None
    config: AlgorithmConfig | None = None

    @property
    def fits(self) -> bool:
        return not self.problems

    def bundles_per_node(self) -> dict[str, int]:
        """Bundles each node holds with the trials at once placed, by node name."""
        counts = {node.name: 0 for node in self.cluster.nodes}
        for where in self.placements:
            for index in where:
                counts[self.cluster.nodes[index].name] += 1
        return counts

    @property
    def spanning(self) -> int:
        """Trials whose bundles are on more than one node."""
        return sum(len(set(where)) > 1 for where in self.placements)

    @property
    def waves(self) -> int:
        return math.ceil(self.trials / self.concurrent) if self.concurrent else 0

    def summary(self) -> str:
        """One line for the start of `workbench run`."""
        if not self.fits:
            what = "the population" if self.concurrent else "one trial"
            return f"Plan: {what} does not fit on {self.cluster.source}"
        return (
            f"Plan: one trial = {fmt(self.request.totals)} ({len(self.request.bundles)} "
            f"bundles, {self.request.strategy}); {self.concurrent} of {self.trials} trials "
            f"at once on {self.cluster.source} ({self.waves} wave"
            f"{'s' if self.waves != 1 else ''})"
        )

    def lines(self) -> list[str]:
        out = [
            f"Plan for {self.file}: {self.algorithm} on {self.env}",
            f"Cluster: {self.cluster.source}: {self.cluster.describe()}",
        ]
        out += [f"WARNING: {w}" for w in self.warnings]
        out.append(
            f"One trial's placement group, as RLlib requests it "
            f"(Algorithm.default_resource_request), strategy {self.request.strategy}:"
        )
        width = max(len(b.role) for b in self.request.bundles)
        for index, bundle in enumerate(self.request.bundles):
            out.append(f"  bundle {index:<3} {bundle.role:<{width}}  {fmt(bundle.resources)}")
        out.append(f"  {'per trial':<11}{'':<{width}}  {fmt(self.request.totals)}")
        grid = f" x {self.grid_points} grid points" if self.grid_points > 1 else ""
        limit = f", max_concurrent {self.max_concurrent}" if self.max_concurrent else ""
        out.append(f"Trials: {self.trials} (population {self.population}{grid}{limit})")
        if self.fits:
            if self.limited_by:
                why = f" (limited by {self.limited_by})"
            else:
                holds = f"{self.capacity}" + (" or more" if self.capacity >= _CAPACITY_CAP else "")
                first = "all of them" if self.concurrent == self.trials else "max_concurrent"
                why = f" ({first}; the cluster holds {holds})"
            out.append(f"At once: {self.concurrent}{why}")
            out.append(
                f"Queue: {self.waves} wave{'s' if self.waves != 1 else ''} "
                f"(ceil({self.trials} / {self.concurrent}))"
                + (
                    ": the population takes about that many times one trial's time"
                    if self.waves > 1
                    else ": every trial starts at once"
                )
            )
        elif self.concurrent:
            out.append(
                f"At once: {self.concurrent} by CPU and GPU, more than the memory holds (see below)"
            )
        else:
            out.append("At once: none, the trial can never be placed (see below)")
        if self.fits and len(self.cluster.nodes) > 1:
            counts = self.bundles_per_node()
            if len(counts) <= 8:
                shown = ", ".join(f"{k} {v}" for k, v in counts.items())
            else:
                nodes: dict[int, int] = {}
                for held in counts.values():
                    nodes[held] = nodes.get(held, 0) + 1
                shown = ", ".join(
                    f"{held} on {k} node{'s' if k != 1 else ''}"
                    for held, k in sorted(nodes.items(), reverse=True)
                )
            out.append(
                f"Bundles per node with {self.concurrent} at once: {shown} ({self.spanning} "
                f"trial{'s' if self.spanning != 1 else ''} across nodes)"
            )
        if self.memory is not None and self.fits:
            mem = self.memory
            out.append(
                f"Memory: one trial = {mem.processes} process{'es' if mem.processes != 1 else ''}"
                f" x ~{gb(mem.per_process)} = {gb(mem.per_trial)}; the cluster declares "
                f"{gb(mem.cluster)}, enough for the {self.concurrent} at once"
            )
        out += [f"Note: {n}" for n in self.notes]
        if self.throughput is not None:
            out += _throughput_lines(self.throughput)
        if self.forecast is not None and self.fits:
            out += forecast_lines(self.forecast)
        return out

    def to_json(self) -> dict[str, Any]:
        rate = self.throughput
        return {
            "file": self.file,
            "algorithm": self.algorithm,
            "env": self.env,
            "strategy": self.request.strategy,
            "bundles": [{"role": b.role, "resources": b.resources} for b in self.request.bundles],
            "per_trial": self.request.totals,
            "cluster": {
                "source": self.cluster.source,
                "nodes": [
                    {"name": n.name, "resources": {k: v for k, v in n.resources.items()}}
                    for n in self.cluster.nodes
                ],
                "totals": self.cluster.totals,
            },
            "trials": self.trials,
            "max_concurrent": self.max_concurrent,
            "concurrent": self.concurrent,
            "capacity": self.capacity,
            "limited_by": self.limited_by,
            "waves": self.waves,
            "bundles_per_node": self.bundles_per_node(),
            "trials_across_nodes": self.spanning,
            "fits": self.fits,
            "cpu_fallback": self.cpu_fallback,
            "problems": [str(p) for p in self.problems],
            "warnings": self.warnings,
            "notes": self.notes,
            "memory": None
            if self.memory is None
            else {
                "per_process_bytes": self.memory.per_process,
                "processes_per_trial": self.memory.processes,
                "cluster_bytes": self.memory.cluster,
                "trials_it_holds": self.memory.concurrent,
            },
            "forecast": None
            if self.forecast is None
            else {
                "iterations_per_trial": self.forecast.iterations,
                "population_iterations": self.forecast.budget,
                "cores": self.forecast.cores,
                "wall_s": self.forecast.wall_s,
                "train_calls": self.forecast.results,
                "iterations_per_s": self.forecast.iterations_per_s,
                "outside_train": self.forecast.outside,
                "before_first_result": self.forecast.before,
                "after_last_result": self.forecast.after,
                "pooled": None
                if self.forecast.pooled is None
                else {
                    "population_env_steps": self.forecast.pooled_env_steps,
                    "wall_s": self.forecast.pooled.wall_s,
                    "iterations_per_s": self.forecast.pooled.iterations_per_s,
                    "outside_train": self.forecast.pooled.outside,
                },
                "bound": self.forecast.bound,
                "iteration_cpu_s": self.forecast.costs.iteration_cpu_s,
                # A trial process's start among the first trials' processes (throughput's
                # start_cpu_s is the probe's fresh process alone).
                "process_start_cpu_s": self.forecast.start_s,
                "source": self.forecast.costs.source,
            },
            "throughput": None
            if rate is None
            else {
                "runners": rate.runners,
                "env_steps_per_s_per_runner": rate.per_runner,
                "sampling_env_steps_per_s": rate.sampling,
                "learner_env_steps_per_s": [rate.learner_low, rate.learner_high],
                # One learner epoch: s per sample and s per minibatch (None: not estimated).
                "learner_s_per_sample": rate.learner_costs[0] if rate.learner_costs else None,
                "learner_s_per_minibatch": rate.learner_costs[1] if rate.learner_costs else None,
                # A train()'s learner connectors, once before its epochs: s per sample.
                "learner_s_per_sample_a_train": rate.learner_call_s_per_sample,
                # A fresh trial process's start alone, CPU s (None: not measured).
                "start_cpu_s": rate.start_cpu_s,
                # The probe's crowd: [trial processes a core, a train()'s CPU there over
                # alone] (None: not measured), and the short evaluations' CPU a train().
                "crowd": list(rate.crowd) if rate.crowd else None,
                "evaluation_cpu_s_a_train": rate.evaluation_s,
                "ratio": list(rate.ratio) if rate.ratio else None,
                "measured": rate.measured,
                "detail": rate.detail,
            },
        }


def with_resources(resolved: ResolvedExperiment, **changes: Any) -> ResolvedExperiment:
    """A copy whose resources section has these fields changed (env_runners: a dict)."""
    return dataclasses.replace(
        resolved, experiment=resources_changed(resolved.experiment, **changes)
    )


def resources_changed(exp: Experiment, **changes: Any) -> Experiment:
    """A copy of ``exp`` whose resources section has these fields changed (env_runners: a dict)."""
    res = exp.resources
    runners = changes.pop("env_runners", None)
    if runners is not None:
        changes["env_runners"] = res.env_runners.model_copy(update=runners)
    return exp.model_copy(update={"resources": res.model_copy(update=changes)})


def request_for(file: Path, config: AlgorithmConfig) -> TrialRequest:
    """The placement group of one trial of the experiment in ``file``, read from RLlib's
    config (``file`` names it in the error when RLlib rejects the config)."""
    # RLlib's validate() logs "You are running PPO on the new API stack!" each time.
    quiet = logging.getLogger("ray.rllib.algorithms.algorithm_config")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return trial_request(config)
    except ValueError as err:  # RLlib's config.validate()
        raise ExperimentError.single(
            str(file), "resources", f"RLlib rejects the config: {err}"
        ) from None
    finally:
        quiet.setLevel(level)


def make_plan(
    resolved: ResolvedExperiment,
    cluster: Cluster,
    *,
    config: AlgorithmConfig | None = None,
    probe: bool = False,
    throughput: Throughput | None = None,
) -> Plan:
    """The plan of one experiment on one cluster (no Ray started; ``probe`` builds the
    algorithm locally for a few seconds to measure sampling and learning rates).

    ``config`` is the run's RLlib config (built from ``resolved`` when not given); the
    plan carries the config and experiment the run should use (the CPU fallback's where
    the plan falls back), and never changes its inputs. ``throughput``: figures already
    measured for this experiment (a probe's), used instead of estimating them again."""
    exp = resolved.experiment
    res = exp.resources
    where = str(resolved.file)
    if config is None:
        config = build_config(resolved.experiment, resolved.defaults)
    request = request_for(resolved.file, config)
    warnings: list[str] = []
    problems: list[Problem] = []
    notes: list[str] = []
    fallback = False
    gpus = request.totals.get("GPU", 0.0)
    if gpus and not cluster.totals.get("GPU") and res.no_gpu == "cpu_fallback":
        fallback = True
        resolved = with_resources(resolved, gpus_per_learner=0.0)
        config = with_resources_of(config, resolved.experiment)
        request = request_for(resolved.file, config)
        warnings.append(
            f"NO GPU on {cluster.source}: the experiment asks for GPU {gpus:g} per "
            "trial and says resources.no_gpu: cpu_fallback, so its learners train on "
            "CPU (the bundles below are the fallback's; expect slower learning)"
        )
    points = grid_points(resolved.search_space)
    trials = exp.population * points
    limit = min(trials, exp.max_concurrent or trials)
    fit = concurrent_trials(request, cluster, limit)
    capacity = fit.concurrent
    if fit.limited_by is None:
        capacity = concurrent_trials(request, cluster, _CAPACITY_CAP).concurrent
    if fit.concurrent == 0:
        problems.append(
            Problem(
                where,
                _unfit_field(request, cluster),
                _unfit_message(resolved.experiment, resolved.file, config, request, cluster),
            )
        )
    memory = None
    if fit.concurrent:
        memory = memory_fit(request, cluster, res.memory_per_process_gb * 2**30, fit.concurrent)
    if memory is not None and memory.concurrent < fit.concurrent:
        field_name = "max_concurrent" if exp.max_concurrent else "population"
        problems.append(
            Problem(where, field_name, _memory_message(memory, fit.concurrent, cluster))
        )
    if res.env_runners.vectorize == "vector_entry_point":
        spec = gym.spec(exp.env.id)
        if spec.vector_entry_point is None:
            problems.append(
                Problem(
                    where,
                    "resources.env_runners.vectorize",
                    f"'vector_entry_point' needs an environment with its own vector class; "
                    f"{exp.env.id} has none: use 'sync', 'async' or 'auto'",
                )
            )
    if fit.concurrent and fit.concurrent < trials and exp.scheduler.type in ("pbt", "pb2"):
        interval = getattr(exp.scheduler, "perturbation_interval", 0)
        notes.append(
            f"{exp.scheduler.type.upper()} with {trials} members and {fit.concurrent} "
            f"slot{'s' if fit.concurrent != 1 else ''}: members take turns, pausing every "
            f"{interval} iterations (each turn restores a checkpoint into a new actor), so "
            "exploits compare members that trained at different times"
        )
    small_on_gpu = small_model_on_gpu(exp, config)
    if small_on_gpu is not None:
        notes.append(small_on_gpu)
    budget = exp.stop.wall_time_s
    if fit.concurrent and exp.stop.trial_time_s is not None:
        waves = math.ceil(trials / fit.concurrent)
        total = waves * exp.stop.trial_time_s
        text = f"stop.trial_time_s {exp.stop.trial_time_s:g} x {waves} waves: about {total:g} s"
        if budget is not None and total > budget:
            text += f", more than stop.wall_time_s {budget:g}: the last waves would not run"
        notes.append(text + " (startup and restores not counted)")
    try:
        throughput = throughput or (
            probe_throughput(exp, resolved.search_space, config)
            if probe
            else estimate_throughput(exp, resolved.search_space, config)
        )
    except ExperimentError:
        raise
    except Exception as err:  # an estimate must never stop a plan
        notes.append(f"sampling vs learning not estimated: {type(err).__name__}: {err}")
    if probe and throughput is not None and throughput.start_cpu_s is None:
        try:
            measured = probe_process(resolved.experiment, resolved.defaults)
            throughput = with_process(throughput, measured, resolved.experiment)
        except StartProbeError as err:  # the forecast keeps the documented constants
            notes.append(f"a trial process's start not measured: {err}")
    population_forecast = None
    if throughput is not None and fit.concurrent:
        population_forecast = forecast_population(
            resolved,
            config,
            throughput,
            processes=len(request.bundles),
            cores=cluster.cores,
            nodes=len(cluster.nodes),
            trials=trials,
            at_once=fit.concurrent,
        )
    return Plan(
        file=where,
        algorithm=exp.algorithm,
        env=exp.env.id,
        request=request,
        cluster=cluster,
        trials=trials,
        population=exp.population,
        grid_points=points,
        max_concurrent=exp.max_concurrent,
        concurrent=fit.concurrent,
        limited_by=fit.limited_by,
        capacity=capacity,
        problems=problems,
        warnings=warnings,
        notes=notes,
        cpu_fallback=fallback,
        throughput=throughput,
        memory=memory,
        forecast=population_forecast,
        placements=fit.placements,
        resolved=resolved,
        config=config,
    )


def _memory_message(memory: MemoryFit, at_once: int, cluster: Cluster) -> str:
    text = (
        f"{at_once} trials would train at once, each {memory.processes} "
        f"process{'es' if memory.processes != 1 else ''} of about {gb(memory.per_process)} "
        "(resources.memory_per_process_gb: a trial's main process, env runners and "
        f"learners), {gb(memory.per_trial)} a trial; {cluster.source} declares "
        f"{gb(memory.cluster)} of memory (largest node {gb(memory.largest_node)})"
    )
    if memory.concurrent == 0:
        return (
            text + ", and no node holds one trial: give it fewer env runners, or nodes with "
            "more memory"
        )
    return (
        text + f", which holds {memory.concurrent} at once. Ray places trials by CPU and GPU, "
        "not memory, and its memory monitor would kill the rest: set max_concurrent: "
        f"{memory.concurrent} (the others queue), give trials fewer env runners, or nodes "
        "more memory"
    )


def _unfit_field(request: TrialRequest, cluster: Cluster) -> str:
    totals = cluster.totals
    if request.totals.get("GPU", 0.0) > totals.get("GPU", 0.0):
        return "resources.gpus_per_learner"
    if request.strategy.startswith("STRICT"):
        return "resources.placement_strategy"
    return "resources"


def _unfit_message(
    exp: Experiment,
    file: Path,
    config: AlgorithmConfig,
    request: TrialRequest,
    cluster: Cluster,
) -> str:
    reasons = unfit_reasons(request, cluster)
    text = (
        f"one trial can never be placed on {cluster.source} [{cluster.describe()}]: "
        + "; ".join(reasons)
        + f". Its placement group ({request.strategy}): {_bundles_text(request)}; "
        f"per trial {fmt(request.totals)}. "
    )
    valid = what_would_fit(exp, file, config, request, cluster)
    if valid:
        text += "It would fit with " + "; or with ".join(valid) + ". "
    return text + "Ray would leave such a trial PENDING forever"


def _bundles_text(request: TrialRequest) -> str:
    """'main process CPU 1, 4 env runners CPU 1 each, learner GPU 1'."""
    groups: list[tuple[str, str, int]] = []  # (kind, resources, count)
    for bundle in request.bundles:
        kind = bundle.role.rstrip("0123456789 ")
        text = fmt(bundle.resources)
        if groups and groups[-1][0] == kind and groups[-1][1] == text:
            groups[-1] = (kind, text, groups[-1][2] + 1)
        else:
            groups.append((kind, text, 1))
    out = []
    for kind, text, count in groups:
        if count == 1:
            out.append(f"{kind} {text}")
        else:
            out.append(f"{count} {kind}s {text} each")
    return ", ".join(out)


def what_would_fit(
    exp: Experiment,
    file: Path,
    config: AlgorithmConfig,
    request: TrialRequest,
    cluster: Cluster,
    most: int = 3,
) -> list[str]:
    """Up to ``most`` changes of the resources section (the fewest fields first) under
    which one trial fits this cluster, each checked against RLlib's bundles of a copy of
    ``config`` with those resources (``file`` names the experiment in RLlib's refusals)."""
    res = exp.resources
    runners = res.env_runners
    gpu = request.totals.get("GPU", 0.0)
    # Per field: the values to try, each as (resources changes, how it reads).
    options: list[list[tuple[dict[str, Any], str]]] = []
    if gpu and not cluster.totals.get("GPU"):
        options.append([({"gpus_per_learner": 0.0}, "resources.no_gpu: cpu_fallback")])
    elif gpu:
        learners = max(res.num_learners, 1)
        values = sorted({cluster.largest("GPU") // learners, 1.0, 0.5, 0.25}, reverse=True)
        options.append(
            [
                ({"gpus_per_learner": v}, f"resources.gpus_per_learner: {v:g}")
                for v in values
                if 0 < v < res.gpus_per_learner and (v >= 1 or res.num_learners <= 1)
            ]
        )
    soft = {"STRICT_PACK": "PACK", "STRICT_SPREAD": "SPREAD"}.get(res.placement_strategy)
    if soft:
        options.append([({"placement_strategy": soft}, f"resources.placement_strategy: {soft}")])
    options.append(
        [
            ({"env_runners": {"count": n}}, f"resources.env_runners.count: {n}")
            for n in range(runners.count - 1, -1, -1)
        ]
    )
    if runners.count:
        options.append(
            [
                ({"env_runners": {"cpus_each": c}}, f"resources.env_runners.cpus_each: {c:g}")
                for c in (0.5, 0.25)
                if c < runners.cpus_each
            ]
        )
    if res.cpus_main > 0.5:
        options.append([({"cpus_main": 0.5}, "resources.cpus_main: 0.5")])
    options = [o for o in options if o]

    def fits(changes: dict[str, Any]) -> bool:
        try:
            changed = resources_changed(exp, **changes)
            candidate = request_for(file, with_resources_of(config, changed))
        except ExperimentError:
            return False
        return not unfit_reasons(candidate, cluster)

    found: list[str] = []
    for size in range(1, len(options) + 1):
        for fields in itertools.combinations(options, size):
            # The first value of each field that fits (the values go from mild to drastic).
            for combo in itertools.product(*fields):
                changes: dict[str, Any] = {}
                for change, _ in combo:
                    for key, value in change.items():
                        if key == "env_runners":
                            changes.setdefault("env_runners", {}).update(value)
                        else:
                            changes[key] = value
                if fits(changes):
                    found.append(" and ".join(text for _, text in combo))
                    break
            if len(found) >= most:
                return found
        if found:
            return found
    return found
