"""`workbench plan` and the pre-flight of `workbench run`: one trial's placement group
against a cluster, before anything starts.

A plan says what RLlib will ask Ray for per trial, how many trials fit at once on the
cluster (a live one, the numbers given, or this machine), how long the population would
queue, and whether the env runners can feed the learner. The pre-flight is the same plan
against the live cluster: a trial that can never fit (Ray would leave it PENDING forever)
is an ExperimentError with the numbers and what would fit, raised before the results
folder or Tune exist.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.algorithm_config import algorithm_config, vectorize_mode
from workbench.errors import ExperimentError, Problem
from workbench.resolve import ResolvedExperiment
from workbench.resources import (
    Cluster,
    TrialRequest,
    concurrent_trials,
    fmt,
    live_cluster,
    trial_request,
    unfit_reasons,
)

Configure = Callable[[Any], Any]
# Counting how many trials a cluster holds stops here (the plan says "or more").
_CAPACITY_CAP = 1000

# How long `workbench run` waits for nodes to join before it calls a trial unfit (seconds;
# a RayJob's driver can start before every worker pod has registered).
WAIT_ENV = "WORKBENCH_WAIT_FOR_RESOURCES_S"

# --- documented rates (rough: they say where sampling cannot keep a learner busy) -----------
# RLlib's own sampling, one SingleAgentEnvRunner on one core of this machine (2 vCPU Xeon
# 2.3 GHz), CartPole, default PPO module, env steps/s by envs per runner (KNOWN_FACTS:
# "RLlib's own sampling on CartPole here"). The environment is not the limit: RLlib's
# per-step Python bookkeeping and inference calls are, so other sim_ext envs are similar.
SAMPLING_RATES: dict[str, dict[int, float]] = {
    "sync": {1: 1.2e3, 8: 5.1e3, 64: 12.3e3},
    "vector_entry_point": {1: 0.9e3, 8: 6.8e3, 64: 22.2e3},
}
# One PPO learner update on CPU with RLlib's default model (two 256-unit layers each for
# policy and value), measured here: 4096 CartPole samples, one epoch, best of 4 runs:
# 6.8 ms per minibatch of 64, 7.7 of 128, 15.6 of 512, 54 of 2048, which is about
# 5.3 ms per minibatch plus 24 us per sample.
CPU_LEARNER_S_PER_MINIBATCH = 5.3e-3
CPU_LEARNER_S_PER_SAMPLE = 24e-6


@dataclass
class Throughput:
    """Env steps per second the runners produce against what the learners consume."""

    runners: int  # 0: the main process samples
    per_runner: float
    learner_low: float | None  # over the searched range; None: not estimated
    learner_high: float | None
    measured: bool  # False: from the documented rates above
    detail: list[str] = field(default_factory=list)
    # The documented rates are RLlib's own runner's; another (faster) runner makes the
    # estimate a floor.
    sampling_floor: bool = False

    @property
    def sampling(self) -> float:
        return max(self.runners, 1) * self.per_runner

    @property
    def ratio(self) -> tuple[float, float] | None:
        """Sampling rate / learner rate, (low, high); below 1 the learner waits."""
        if self.learner_low is None or self.learner_high is None:
            return None
        return self.sampling / self.learner_high, self.sampling / self.learner_low


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

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def waves(self) -> int:
        return math.ceil(self.trials / self.concurrent) if self.concurrent else 0

    def summary(self) -> str:
        """One line for the start of `workbench run`."""
        if not self.fits:
            return "Plan: one trial does not fit on " + self.cluster.source
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
        else:
            out.append("At once: none, the trial can never be placed (see below)")
        out += [f"Note: {n}" for n in self.notes]
        if self.throughput is not None:
            out += _throughput_lines(self.throughput)
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
            "fits": self.fits,
            "cpu_fallback": self.cpu_fallback,
            "problems": [str(p) for p in self.problems],
            "warnings": self.warnings,
            "notes": self.notes,
            "throughput": None
            if rate is None
            else {
                "runners": rate.runners,
                "env_steps_per_s_per_runner": rate.per_runner,
                "sampling_env_steps_per_s": rate.sampling,
                "learner_env_steps_per_s": [rate.learner_low, rate.learner_high],
                "ratio": list(rate.ratio) if rate.ratio else None,
                "measured": rate.measured,
                "detail": rate.detail,
            },
        }


def _throughput_lines(rate: Throughput) -> list[str]:
    how = "measured by --probe on this machine" if rate.measured else "estimate, not measured"
    out = [f"Sampling vs learning ({how}):"]
    if rate.runners:
        each = f"{rate.runners} runners x ~{_rate(rate.per_runner)}"
        out.append(f"  sampling: {each} = ~{_rate(rate.sampling)}")
    else:
        out.append(f"  sampling: in the trial's main process, ~{_rate(rate.sampling)}")
    out += [f"  {d}" for d in rate.detail]
    ratio = rate.ratio
    if ratio is None or rate.learner_low is None or rate.learner_high is None:
        return out
    low, high = ratio
    span = _rate(rate.learner_low)
    if rate.learner_high != rate.learner_low:
        span += f" to ~{_rate(rate.learner_high)}"
    out.append(f"  learner: ~{span}")
    shown = f"{low:.2g}" if math.isclose(low, high, rel_tol=0.05) else f"{low:.2g}-{high:.2g}"
    if high < 1 and rate.sampling_floor:
        verdict = (
            "sampling may not keep the learner busy (the sampling figure is a floor: "
            "`workbench plan --probe` measures it)"
        )
    elif high < 1:
        verdict = (
            f"sampling cannot keep the learner busy: it waits for samples (busy about "
            f"{100 * high / (1 + high):.0f}% of an iteration at best); add env runners or "
            "envs per runner"
        )
    elif low < 1:
        verdict = "sampling keeps the learner busy over part of the searched range only"
    else:
        verdict = "sampling keeps up; the learner is the slower half"
    out.append(f"  ratio sampling/learner: {shown}: {verdict}")
    return out


def _rate(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.3g}M env steps/s"
    if value >= 1e3:
        return f"{value / 1e3:.3g}k env steps/s"
    return f"{value:.3g} env steps/s"


# --- building a plan -----------------------------------------------------------------------------


def grid_points(resolved: ResolvedExperiment) -> int:
    points = 1
    for spec in resolved.search_space.values():
        if spec.kind == "grid":
            points *= len(spec.grid or [])
    return points


def with_resources(resolved: ResolvedExperiment, **changes: Any) -> ResolvedExperiment:
    """A copy whose resources section has these fields changed (env_runners: a dict)."""
    exp = resolved.experiment
    res = exp.resources
    runners = changes.pop("env_runners", None)
    if runners is not None:
        changes["env_runners"] = res.env_runners.model_copy(update=runners)
    new = exp.model_copy(update={"resources": res.model_copy(update=changes)})
    return dataclasses.replace(resolved, experiment=new)


def request_for(resolved: ResolvedExperiment, configure: Configure | None = None) -> TrialRequest:
    """The placement group of one trial of this experiment, read from RLlib."""
    config = algorithm_config(resolved)
    if configure is not None:
        config = configure(config)
    # RLlib's validate() logs "You are running PPO on the new API stack!" each time.
    quiet = logging.getLogger("ray.rllib.algorithms.algorithm_config")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return trial_request(config)
    except ValueError as err:  # RLlib's config.validate()
        raise ExperimentError.single(
            str(resolved.file), "resources", f"RLlib rejects the config: {err}"
        ) from None
    finally:
        quiet.setLevel(level)


def make_plan(
    resolved: ResolvedExperiment,
    cluster: Cluster,
    *,
    configure: Configure | None = None,
    probe: bool = False,
) -> Plan:
    """The plan of one experiment on one cluster (no Ray started; ``probe`` builds the
    algorithm locally for a few seconds to measure sampling and learning rates)."""
    exp = resolved.experiment
    res = exp.resources
    where = str(resolved.file)
    request = request_for(resolved, configure)
    warnings: list[str] = []
    problems: list[Problem] = []
    notes: list[str] = []
    fallback = False
    gpus = request.totals.get("GPU", 0.0)
    if gpus and not cluster.totals.get("GPU") and res.no_gpu == "cpu_fallback":
        fallback = True
        resolved = with_resources(resolved, gpus_per_learner=0.0)
        request = request_for(resolved, configure)
        warnings.append(
            f"NO GPU on {cluster.source}: the experiment asks for GPU {gpus:g} per "
            "trial and says resources.no_gpu: cpu_fallback, so its learners train on "
            "CPU (the bundles below are the fallback's; expect slower learning)"
        )
    points = grid_points(resolved)
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
                _unfit_message(resolved, request, cluster, configure),
            )
        )
    if res.env_runners.vectorize == "vector_entry_point":
        import gymnasium as gym

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
    budget = exp.stop.wall_time_s
    if fit.concurrent and exp.stop.trial_time_s is not None:
        waves = math.ceil(trials / fit.concurrent)
        total = waves * exp.stop.trial_time_s
        text = f"stop.trial_time_s {exp.stop.trial_time_s:g} x {waves} waves: about {total:g} s"
        if budget is not None and total > budget:
            text += f", more than stop.wall_time_s {budget:g}: the last waves would not run"
        notes.append(text + " (startup and restores not counted)")
    throughput = None
    try:
        throughput = probe_throughput(resolved) if probe else estimate_throughput(resolved)
    except ExperimentError:
        raise
    except Exception as err:  # an estimate must never stop a plan
        notes.append(f"sampling vs learning not estimated: {type(err).__name__}: {err}")
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
    )


def _unfit_field(request: TrialRequest, cluster: Cluster) -> str:
    totals = cluster.totals
    if request.totals.get("GPU", 0.0) > totals.get("GPU", 0.0):
        return "resources.gpus_per_learner"
    if request.strategy.startswith("STRICT"):
        return "resources.placement_strategy"
    return "resources"


def _unfit_message(
    resolved: ResolvedExperiment,
    request: TrialRequest,
    cluster: Cluster,
    configure: Configure | None,
) -> str:
    reasons = unfit_reasons(request, cluster)
    text = (
        f"one trial can never be placed on {cluster.source} [{cluster.describe()}]: "
        + "; ".join(reasons)
        + f". Its placement group ({request.strategy}): {_bundles_text(request)}; "
        f"per trial {fmt(request.totals)}. "
    )
    valid = what_would_fit(resolved, request, cluster, configure)
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
    resolved: ResolvedExperiment,
    request: TrialRequest,
    cluster: Cluster,
    configure: Configure | None = None,
    most: int = 3,
) -> list[str]:
    """Up to ``most`` changes of the resources section (the fewest fields first) under
    which one trial fits this cluster, each checked against RLlib's bundles."""
    res = resolved.experiment.resources
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
            candidate = request_for(with_resources(resolved, **changes), configure)
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


# --- sampling vs learning --------------------------------------------------------------------


def _searched_range(resolved: ResolvedExperiment, name: str, base: float) -> tuple[float, float]:
    """The range a hyperparameter takes over the search (its fixed value if not searched)."""
    spec = resolved.search_space.get(name)
    if spec is None:
        return base, base
    if spec.bounds is not None:
        return spec.bounds
    values = [v for v in (spec.choice or spec.grid or []) if isinstance(v, int | float)]
    return (min(values), max(values)) if values else (base, base)


def _per_runner_rate(envs: int, mode: str) -> float:
    """Documented env steps/s of one runner (log-log interpolation; flat past the table)."""
    table = SAMPLING_RATES["vector_entry_point" if mode == "vector_entry_point" else "sync"]
    points = sorted(table.items())
    if envs <= points[0][0]:
        return points[0][1]
    for (n0, r0), (n1, r1) in itertools.pairwise(points):
        if envs <= n1:
            t = math.log(envs / n0) / math.log(n1 / n0)
            return math.exp(math.log(r0) + t * math.log(r1 / r0))
    return points[-1][1]


def _learner_model(
    resolved: ResolvedExperiment, config: Any
) -> tuple[tuple[float, float], tuple[float, float], tuple[float, float], int] | None:
    """(epochs range, minibatch range, batch range, learners) of an on-policy learner,
    None for a replaying one (DQN, SAC: training_intensity sets its pace)."""
    if resolved.experiment.algorithm not in ("PPO", "APPO", "IMPALA"):
        return None
    batch = _searched_range(
        resolved, "train_batch_size_per_learner", float(config.train_batch_size_per_learner)
    )
    epochs = _searched_range(resolved, "num_epochs", float(getattr(config, "num_epochs", 1)))
    minibatch_base = getattr(config, "minibatch_size", None) or batch[1]
    minibatch = _searched_range(resolved, "minibatch_size", float(minibatch_base))
    minibatch = (min(minibatch[0], batch[1]), min(minibatch[1], batch[1]))
    return epochs, minibatch, batch, max(int(config.num_learners), 1)


def estimate_throughput(resolved: ResolvedExperiment) -> Throughput:
    """From the documented rates above (rough; say so wherever it is shown)."""
    res = resolved.experiment.resources
    config = algorithm_config(resolved)
    mode = vectorize_mode(resolved)
    runners = res.env_runners.count
    cpus = res.env_runners.cpus_each if runners else res.cpus_main
    per_runner = _per_runner_rate(res.env_runners.envs_per_runner, mode) * min(cpus, 1.0)
    detail = [
        f"per runner: {res.env_runners.envs_per_runner} envs, {mode}, "
        f"{min(cpus, 1.0):g} of a core (RLlib's SingleAgentEnvRunner measured on CartPole here)"
    ]
    runner = getattr(getattr(config, "env_runner_cls", None), "__name__", "SingleAgentEnvRunner")
    floor = runner != "SingleAgentEnvRunner"
    if floor:
        detail.append(
            f"per runner: this experiment samples with {runner}, faster than "
            "that: the sampling figure is a floor (--probe measures it)"
        )
    model = _learner_model(resolved, config)
    low = high = None
    if model is None:
        detail.append(
            f"learner: not estimated ({resolved.experiment.algorithm} replays samples: "
            "training_intensity sets how much it learns per sampled step)"
        )
    elif res.gpus_per_learner > 0:
        detail.append(
            "learner: not estimated on a GPU (no documented GPU figure; `workbench plan "
            "--probe` on a GPU node measures it)"
        )
    else:
        (e_low, e_high), (m_low, m_high), _, learners = model

        def rate(epochs: float, minibatch: float) -> float:
            per_sample = CPU_LEARNER_S_PER_SAMPLE + CPU_LEARNER_S_PER_MINIBATCH / minibatch
            return learners / (epochs * per_sample)

        low, high = rate(e_high, m_low), rate(e_low, m_high)
        detail.append(
            f"learner: {learners} on CPU, num_epochs {_span(e_low, e_high)}, minibatch_size "
            f"{_span(m_low, m_high)}; RLlib's default model, about "
            f"{CPU_LEARNER_S_PER_MINIBATCH * 1e3:g} ms per minibatch + "
            f"{CPU_LEARNER_S_PER_SAMPLE * 1e6:g} us per sample per epoch (measured here)"
        )
    return Throughput(
        runners, per_runner, low, high, measured=False, detail=detail, sampling_floor=floor
    )


def _span(low: float, high: float) -> str:
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def probe_throughput(resolved: ResolvedExperiment, seconds: float = 2.0) -> Throughput:
    """Measures here: one env runner's sampling and one learner update of this experiment
    (its env, envs per runner, vectorize mode, model and batch; a GPU learner if this
    machine has CUDA, else CPU), built locally in this process for a few seconds."""
    import torch
    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

    res = resolved.experiment.resources
    gpu = res.gpus_per_learner > 0 and torch.cuda.is_available()
    config = (
        algorithm_config(resolved)
        .env_runners(num_env_runners=0)
        .learners(num_learners=0, num_gpus_per_learner=1 if gpu else 0)
    )
    model = _learner_model(resolved, config)
    algo: Any = config.build_algo()
    try:
        runner = algo.env_runner
        runner.sample(num_timesteps=256)  # warm-up: the first calls allocate buffers
        steps, start = 0, time.perf_counter()
        episodes: list[Any] = []
        while time.perf_counter() - start < seconds / 2:
            batch = runner.sample(num_timesteps=512)
            episodes += batch
            steps += sum(len(e) for e in batch)
        per_runner = steps / (time.perf_counter() - start)
        detail = [
            f"per runner: {res.env_runners.envs_per_runner} envs, {vectorize_mode(resolved)}, "
            "one core of this machine"
        ]
        low = high = None
        if model is None:
            detail.append(f"learner: not measured ({resolved.experiment.algorithm} replays)")
        else:
            (e_low, e_high), (m_low, m_high), _, learners = model
            minibatch = int(min(max((m_low + m_high) / 2, 1), steps))
            update = algo.learner_group.update
            args = {"timesteps": {NUM_ENV_STEPS_SAMPLED_LIFETIME: steps}, "num_epochs": 1}
            update(episodes=episodes, minibatch_size=minibatch, **args)  # warm-up
            start = time.perf_counter()
            update(episodes=episodes, minibatch_size=minibatch, **args)
            per_sample_epoch = (time.perf_counter() - start) / steps
            low = learners / (e_high * per_sample_epoch)
            high = learners / (e_low * per_sample_epoch)
            device = "GPU" if gpu else "CPU"
            detail.append(
                f"learner: one epoch over {steps} samples in minibatches of {minibatch} on "
                f"{device}: {per_sample_epoch * 1e6:.3g} us per sample; x {learners} learners, "
                f"num_epochs {_span(e_low, e_high)}"
            )
            if res.gpus_per_learner > 0 and not gpu:
                detail.append("learner: this machine has no CUDA, so the CPU was measured")
        return Throughput(res.env_runners.count, per_runner, low, high, True, detail)
    finally:
        algo.stop()


# --- the pre-flight of `workbench run` / `workbench resume` -------------------------------------


def preflight(
    resolved: ResolvedExperiment,
    *,
    address: str | None = None,
    configure: Configure | None = None,
) -> Plan:
    """Checks the experiment against the live cluster Ray is connected to.

    Raises ExperimentError (exit 2) when a trial can never fit, after waiting up to
    $WORKBENCH_WAIT_FOR_RESOURCES_S for nodes to join. With resources.no_gpu:
    cpu_fallback on a cluster without GPU it switches ``resolved`` to CPU learners. On a
    multi-node cluster it checks that every node imports the project and sees the results
    storage (a warning, with the reason, where one does not).
    """
    deadline = time.monotonic() + float(os.environ.get(WAIT_ENV) or 0)
    plan = make_plan(resolved, live_cluster(address), configure=configure)
    while not plan.fits and time.monotonic() < deadline:
        print(
            f"workbench: waiting for the cluster to grow ({plan.cluster.describe()}; "
            f"{WAIT_ENV} allows {deadline - time.monotonic():.0f} s more)",
            file=sys.stderr,
        )
        time.sleep(min(10.0, max(deadline - time.monotonic(), 0.0)))
        plan = make_plan(resolved, live_cluster(address), configure=configure)
    if not plan.fits:
        raise ExperimentError(plan.problems)
    if plan.cpu_fallback:
        fallback = with_resources(resolved, gpus_per_learner=0.0)
        resolved.experiment = fallback.experiment
    if len(plan.cluster.nodes) > 1:
        plan.warnings += check_nodes(resolved, plan.cluster)
    for warning in plan.warnings:
        print(f"workbench: WARNING: {warning}", file=sys.stderr)
    print(plan.summary())
    return plan


def check_nodes(
    resolved: ResolvedExperiment, cluster: Cluster, timeout_s: float = 120.0
) -> list[str]:
    """Runs a zero-CPU task on every alive node: can it import the project, and does it
    see the results storage (a file the driver writes there)? Returns warnings; raises
    ExperimentError when a node cannot import the project (its trials would fail)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    storage = resolved.results_dir.parent
    storage.mkdir(parents=True, exist_ok=True)
    marker = storage / f".workbench-preflight-{uuid.uuid4().hex[:12]}"
    marker.write_text("written by the driver of `workbench run` to see which nodes share it\n")

    def node_check(path: str) -> dict[str, Any]:
        import importlib
        import os as node_os

        out: dict[str, Any] = {"sees_storage": node_os.path.exists(path)}
        for module in ("workbench", "sim_ext"):
            try:
                importlib.import_module(module)
            except Exception as err:  # any import failure is the answer
                out[module] = f"{type(err).__name__}: {err}"
        return out

    remote = ray.remote(num_cpus=0, max_retries=0)(node_check)
    refs = {}
    for node in cluster.nodes:
        if node.node_id:
            strategy = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
            refs[node.name] = remote.options(scheduling_strategy=strategy).remote(str(marker))
    answers: dict[str, dict[str, Any] | str] = {}
    try:
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        for name, ref in refs.items():
            if ref not in ready:
                answers[name] = f"no answer in {timeout_s:g} s"
                continue
            try:
                answers[name] = ray.get(ref)
            except Exception as err:  # the node could not even run the check
                answers[name] = f"the check failed: {type(err).__name__}: {err}"
    finally:
        marker.unlink(missing_ok=True)
    return judge_nodes(answers, file=str(resolved.file), storage=storage)


def judge_nodes(answers: dict[str, dict[str, Any] | str], *, file: str, storage: Path) -> list[str]:
    """The pre-flight's verdict on every node's answer (or why there is none): raises
    ExperimentError when a node cannot import the project, returns warnings otherwise."""
    warnings: list[str] = []
    cannot_import: list[str] = []
    unshared: list[str] = []
    for name, answer in answers.items():
        if isinstance(answer, str):
            warnings.append(f"node {name} did not take part in the pre-flight: {answer}")
            continue
        missing = [f"{m} ({answer[m]})" for m in ("workbench", "sim_ext") if m in answer]
        if missing:
            cannot_import.append(f"{name}: {', '.join(missing)}")
        if not answer["sees_storage"]:
            unshared.append(name)
    if cannot_import:
        raise ExperimentError.single(
            file,
            "",
            "nodes of the cluster cannot import the project, so their trials would fail: "
            + "; ".join(cannot_import)
            + ". Install it on every node (the same image, see deploy/kuberay) or ship it "
            "with a runtime_env (README: Existing clusters)",
        )
    if unshared:
        warnings.append(
            f"results storage {storage} is not shared: {len(unshared)} of "
            f"{len(answers)} nodes ({', '.join(unshared)}) do not see a file the "
            "driver wrote there. Trials on those nodes write checkpoints to their own disk, "
            "where PBT clones, restores and `workbench resume` cannot find them; mount one "
            "shared volume (NFS, a ReadWriteMany PVC) at the same path on every node"
        )
    return warnings
