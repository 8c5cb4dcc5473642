"""A trial's placement group and how many of them a cluster holds: pure functions.

Tune gang-schedules every RLlib trial as one placement group: all of its bundles (the
main process, one per env runner, one per remote learner) are reserved at once or the
trial waits. The bundles are read from RLlib itself
(`Algorithm.default_resource_request(config)`, what Tune asks Ray for), never derived
again here. What this module adds is the arithmetic Ray does not do for you before a run:
does one trial fit on any placement of the cluster's nodes under the strategy, and how
many fit at once. Ray's answer to a trial that can never fit is to leave it PENDING forever.

Nothing here starts Ray; `live_cluster` reads a running one.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray

from workbench.errors import ExperimentError
from workbench.tune_ext.ray_private import detected_cpus_and_gpus, detected_memory_bytes

Resources = dict[str, float]

# Ray counts resources in fixed point with four decimals (0.0001 of a CPU or GPU).
_UNIT = 10_000
# Resources Ray defines; any other a bundle asks for is custom (a node label, an accelerator).
_PREDEFINED = frozenset({"CPU", "GPU", "memory", "object_store_memory"})
# Node entries that are not something a bundle asks for (shown nowhere, fitted anyway).
_HIDDEN_PREFIXES = ("node:", "accelerator_type:")
_HIDDEN = frozenset({"memory", "object_store_memory"})
# A placement search gives up after this many steps (only huge, nearly full clusters).
_SEARCH_BUDGET = 200_000


# --- one trial's request ---------------------------------------------------------------------


@dataclass(frozen=True)
class Bundle:
    role: str  # "main process", "env runner 2", "learner 1", ...
    resources: Resources


@dataclass(frozen=True)
class TrialRequest:
    """One trial's placement group: its bundles in RLlib's order and the strategy."""

    bundles: tuple[Bundle, ...]
    strategy: str

    @property
    def totals(self) -> Resources:
        out: Resources = {}
        for bundle in self.bundles:
            for key, value in bundle.resources.items():
                out[key] = out.get(key, 0.0) + value
        return {k: round(v, 4) for k, v in out.items()}


def trial_request(config: Any) -> TrialRequest:
    """The placement group Tune will request for a trial of this RLlib config.

    Straight from ``Algorithm.default_resource_request``; only the roles are added,
    read off the same config: bundle 0 is the main process, then one per env runner,
    then evaluation runners, then one per learner (RLlib's order).
    """
    factory = config.algo_class.default_resource_request(config)
    raw = [dict(b) for b in factory.bundles]
    runners = int(config.num_env_runners)
    learners = int(config.num_learners)
    roles = ["main process + learner" if learners == 0 else "main process"]
    roles += [f"env runner {i + 1}" for i in range(runners)]
    tail = len(raw) - len(roles)
    learner_bundles = learners if learners else int(config.num_aggregator_actors_per_learner)
    others = max(0, tail - learner_bundles)
    roles += [f"evaluation runner {i + 1}" for i in range(others)]
    kind = "learner" if learners else "aggregator"
    roles += [f"{kind} {i + 1}" for i in range(tail - others)]
    pairs = zip(roles, raw, strict=True)
    bundles = tuple(Bundle(role, {k: float(v) for k, v in b.items() if v}) for role, b in pairs)
    return TrialRequest(bundles=bundles, strategy=str(factory.strategy))


# --- the cluster -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    name: str
    resources: Resources
    host: str = ""  # the machine's address (a live cluster's NodeManagerAddress)
    node_id: str = ""  # Ray's, for a live cluster


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[Node, ...]
    source: str  # where the numbers come from, said in every message
    # The cores the nodes have, where known to be fewer than the CPUs they declare (nodes
    # on this machine share its cores); None: the declared CPUs are cores.
    shared_cores: float | None = None

    @property
    def cores(self) -> float:
        declared = self.totals.get("CPU", 0.0)
        return declared if self.shared_cores is None else min(declared, self.shared_cores)

    @property
    def totals(self) -> Resources:
        out: Resources = {}
        for node in self.nodes:
            for key, value in node.resources.items():
                out[key] = out.get(key, 0.0) + value
        return out

    def largest(self, key: str) -> float:
        return max((n.resources.get(key, 0.0) for n in self.nodes), default=0.0)

    def describe(self) -> str:
        count = len(self.nodes)
        text = f"{count} node{'s' if count != 1 else ''}, {fmt(self.totals)} in total"
        if count > 1:
            shapes: dict[str, int] = {}
            for node in self.nodes:
                shapes[fmt(node.resources)] = shapes.get(fmt(node.resources), 0) + 1
            text += " (" + "; ".join(f"{n} x {s}" for s, n in shapes.items()) + ")"
        return text


def fmt(resources: Mapping[str, float]) -> str:
    """'CPU 4, GPU 1, node_a 1' (what a bundle or node holds; zeros and Ray's markers left out)."""
    keys = sorted(
        (k for k, v in resources.items() if v and shown(k)),
        key=lambda k: (k != "CPU", k != "GPU", k),
    )
    return ", ".join(f"{k} {resources[k]:g}" for k in keys) or "nothing"


def shown(key: str) -> bool:
    return key not in _HIDDEN and not key.startswith(_HIDDEN_PREFIXES)


def parse_cluster(specs: Sequence[str]) -> Cluster:
    """Nodes from ``cpus=N,gpus=M[,nodes=K][,RESOURCE=X]`` specs, one spec per node shape.

    Raises ValueError with the spec and what is valid.
    """
    nodes: list[Node] = []
    for spec in specs:
        resources: Resources = {}
        count = 1
        for part in spec.split(","):
            key, sep, text = part.partition("=")
            key = key.strip()
            value = memory_bytes(text) if key == "memory" else _number(text)
            if not sep or not key or not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"{spec!r}: {part.strip()!r} is not name=number; give "
                    "cpus=N,gpus=M (per node), optionally nodes=K, memory=SIZE (e.g. "
                    "16GB) and custom resources"
                )
            if key == "nodes":
                if not value.is_integer() or value < 1:
                    raise ValueError(f"{spec!r}: nodes={text} is not a whole number >= 1")
                count = int(value)
            else:
                name = {"cpus": "CPU", "cpu": "CPU", "gpus": "GPU", "gpu": "GPU"}.get(key, key)
                resources[name] = value
        if not any(resources.values()):
            raise ValueError(f"{spec!r}: a node with no resources; give cpus=N,gpus=M")
        start = len(nodes)
        nodes += [Node(f"node {start + i + 1}", dict(resources)) for i in range(count)]
    if not nodes:
        raise ValueError("no node given; give cpus=N,gpus=M")
    return Cluster(tuple(nodes), "--cluster " + " --cluster ".join(specs))


_SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def memory_bytes(text: str) -> float:
    """Bytes from '16GB', '16G', '16GiB', '512MB' or a plain number of bytes (a GB is
    2**30 bytes, as Ray and the OS count memory); NaN when it is none of those."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = text[-1:] if text[-1:] in _SIZE_UNITS else ""
    return _number(text.removesuffix(unit)) * _SIZE_UNITS[unit]


def cluster_from_ray_nodes(
    nodes: Iterable[Mapping[str, Any]], source: str, local_host: str = ""
) -> Cluster:
    """The alive nodes of ``ray.nodes()``, with their total (not free) resources. Nodes at
    ``local_host`` (this machine's address) or on loopback share this machine's cores,
    whatever CPUs they declare."""
    out = []
    for info in nodes:
        if not info.get("Alive", False):
            continue
        host = str(info.get("NodeManagerAddress", ""))
        node_id = str(info.get("NodeID", ""))
        resources = {str(k): float(v) for k, v in dict(info.get("Resources", {})).items()}
        out.append(Node(f"{host} ({node_id[:8]})", resources, host, node_id))
    here = [n for n in out if n.host == local_host or n.host.startswith("127.")]
    if not here:
        return Cluster(tuple(out), source)
    declared_here = sum(n.resources.get("CPU", 0.0) for n in here)
    elsewhere = sum(n.resources.get("CPU", 0.0) for n in out if n not in here)
    cores = elsewhere + min(declared_here, float(os.cpu_count() or 1))
    return Cluster(tuple(out), source, cores)


def live_cluster(address: str | None = None) -> Cluster:
    """The running Ray cluster this process is connected to."""

    where = address or os.environ.get("RAY_ADDRESS")
    nodes = ray.nodes()  # type: ignore[no-untyped-call]
    source = f"the Ray cluster at {where}" if where else "the local Ray instance"
    here = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    return cluster_from_ray_nodes(nodes, source, here)


def cluster_for(specs: Sequence[str], address: str | None, *, file: str) -> Cluster:
    """The cluster `workbench plan` plans for: the ``--cluster`` numbers given, the Ray
    cluster at ``address`` (or $RAY_ADDRESS), else this machine."""
    if specs:
        try:
            return parse_cluster(specs)
        except ValueError as err:
            raise ExperimentError.single(file, "--cluster", str(err)) from None
    if address or os.environ.get("RAY_ADDRESS"):
        ray.init(address=address or os.environ["RAY_ADDRESS"], log_to_driver=False)
        return live_cluster(address)
    return this_machine()


def this_machine() -> Cluster:
    """What a local ``ray.init()`` would offer here, without starting it."""
    cpus: float = float(os.cpu_count() or 1)
    gpus = 0.0
    # Ray's own detection; if its private API moved, the plain count is still a fair answer.
    with contextlib.suppress(Exception):
        cpus, gpus = detected_cpus_and_gpus()
    resources = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
    with contextlib.suppress(Exception):
        resources["memory"] = detected_memory_bytes()
    return Cluster(
        (Node("this machine", resources),), "this machine, as a local ray.init() sees it"
    )


# --- placement -----------------------------------------------------------------------------------


def _units(resources: Mapping[str, float]) -> dict[str, int]:
    return {k: round(v * _UNIT) for k, v in resources.items() if v}


def _fits(need: Mapping[str, int], free: Mapping[str, int]) -> bool:
    return all(free.get(k, 0) >= v for k, v in need.items())


def _take(free: dict[str, int], need: Mapping[str, int], sign: int = 1) -> None:
    for k, v in need.items():
        free[k] = free.get(k, 0) - sign * v


def _score(need: Mapping[str, int], free: Mapping[str, int]) -> float:
    """Ray's LeastResourceScorer: -1 where the bundle does not fit, else the sum over the
    resources it asks for of the share of the node's free amount left after it; the
    emptiest node scores highest."""
    if not _fits(need, free):
        return -1.0
    return sum((free[k] - v) / free[k] for k, v in need.items() if free.get(k, 0) > 0)


def _priority(need: Mapping[str, int]) -> tuple[int, tuple[int, ...], int, int]:
    """Ray places a group's bundles GPU first, then custom resources, memory, CPU."""
    custom = tuple(v for k, v in sorted(need.items()) if k not in _PREDEFINED)
    return (need.get("GPU", 0), custom, need.get("memory", 0), need.get("CPU", 0))


def _best(need: Mapping[str, int], left: list[dict[str, int]], nodes: Iterable[int]) -> int:
    """The node Ray's scorer picks (ties: the first; Ray breaks them in its own order)."""
    best, best_score = -1, -1.0
    for i in nodes:
        score = _score(need, left[i])
        if score > best_score:
            best, best_score = i, score
    return best


def ray_place(request: TrialRequest, free: Sequence[Mapping[str, float]]) -> list[int] | None:
    """The nodes Ray 2.60's bundle scheduling policies (GCS, greedy, no backtracking)
    choose for this group on ``free``, or None where they would not place it now: each
    bundle, most demanding first, goes to the node that would be left emptiest; PACK
    then puts every later bundle that fits on that node before it takes the next one,
    SPREAD takes a node not used yet while one fits, STRICT_PACK scores the group's
    totals, STRICT_SPREAD uses each node once."""
    need = [_units(b.resources) for b in request.bundles]
    left = [_units(f) for f in free]
    order = sorted(range(len(need)), key=lambda i: _priority(need[i]), reverse=True)
    chosen: dict[int, int] = {}
    strategy = request.strategy
    if strategy == "STRICT_PACK":
        node = _best(_units(request.totals), left, range(len(left)))
        return None if node < 0 else [node] * len(need)
    if strategy == "PACK":
        candidates = list(range(len(left)))
        todo = list(order)
        while todo:
            node = _best(need[todo[0]], left, candidates)
            if node < 0:
                return None
            for b in list(todo):
                if _fits(need[b], left[node]):
                    _take(left[node], need[b])
                    chosen[b] = node
                    todo.remove(b)
            candidates.remove(node)
        return [chosen[i] for i in range(len(need))]
    used: list[int] = []
    for b in order:
        node = _best(need[b], left, [i for i in range(len(left)) if i not in used])
        if node < 0 and strategy == "SPREAD":
            node = _best(need[b], left, used)
        if node < 0:
            return None
        _take(left[node], need[b])
        chosen[b] = node
        if node not in used:
            used.append(node)
    return [chosen[i] for i in range(len(need))]


def place(request: TrialRequest, free: Sequence[Mapping[str, float]]) -> list[int] | None:
    """A node index for every bundle such that the group fits ``free`` under the
    strategy, or None. Largest bundles first; PACK prefers nodes the group already uses,
    SPREAD nodes it does not, as Ray's scheduler does (an estimate of its choices, exact
    about whether any placement exists within the search budget)."""
    need = [_units(b.resources) for b in request.bundles]
    left = [_units(f) for f in free]
    strategy = request.strategy
    if strategy in ("STRICT_PACK", "PACK"):
        total = _units(request.totals)
        # The tightest node that holds the whole group (best fit).
        whole = [i for i, f in enumerate(left) if _fits(total, f)]
        if whole:
            best = min(whole, key=lambda i: _size(left[i]))
            return [best] * len(need)
        if strategy == "STRICT_PACK":
            return None
    distinct = strategy == "STRICT_SPREAD"
    if distinct and len(need) > len(left):
        return None
    order = sorted(range(len(need)), key=lambda i: _size(need[i]), reverse=True)
    chosen: dict[int, int] = {}
    used: dict[int, int] = {}
    steps = 0

    def search(depth: int) -> bool:
        nonlocal steps
        if depth == len(order):
            return True
        steps += 1
        if steps > _SEARCH_BUDGET:
            return False
        bundle = need[order[depth]]
        tried: set[tuple[tuple[tuple[str, int], ...], int]] = set()
        candidates = [
            i
            for i in range(len(left))
            if _fits(bundle, left[i]) and not (distinct and used.get(i, 0))
        ]
        if strategy == "SPREAD":  # the least used, emptiest node first
            candidates.sort(key=lambda i: (used.get(i, 0), tuple(-x for x in _size(left[i]))))
        else:  # PACK: stay on the nodes already used, fullest first
            candidates.sort(key=lambda i: (-used.get(i, 0), _size(left[i])))
        for i in candidates:
            # Nodes with the same free resources and the same use are interchangeable.
            key = (tuple(sorted(left[i].items())), used.get(i, 0))
            if key in tried:
                continue
            tried.add(key)
            _take(left[i], bundle)
            used[i] = used.get(i, 0) + 1
            chosen[order[depth]] = i
            if search(depth + 1):
                return True
            _take(left[i], bundle, -1)
            used[i] -= 1
        return False

    if not search(0):
        return None
    return [chosen[i] for i in range(len(need))]


@dataclass
class Fit:
    """How many trials a cluster holds at once, and what stops one more."""

    concurrent: int
    limited_by: str | None  # what stops one more trial, with the numbers (None: the limit)
    per_resource: dict[str, int] = field(default_factory=dict)  # bound from totals alone
    # The node index of each bundle of each trial placed, in the order they were placed.
    placements: list[list[int]] = field(default_factory=list)


def concurrent_trials(request: TrialRequest, cluster: Cluster, limit: int) -> Fit:
    """Places trial after trial on the cluster's total resources until one does not fit
    (or ``limit``: the number of trials, or max_concurrent)."""
    free = [dict(n.resources) for n in cluster.nodes]
    totals = cluster.totals
    per_resource = {
        k: math.floor(round(totals.get(k, 0.0) / v, 6)) for k, v in request.totals.items() if v
    }
    placements: list[list[int]] = []
    while len(placements) < limit:
        # Where Ray would put it; where its greedy choice fails and a search finds room
        # (rare: bundles of very different shapes), the search's placement.
        where = ray_place(request, free) or place(request, free)
        if where is None:
            break
        for bundle, index in zip(request.bundles, where, strict=True):
            for k, v in bundle.resources.items():
                free[index][k] = round(free[index].get(k, 0.0) - v, 4)
        placements.append(where)
    count = len(placements)
    reason: str | None = None
    if count < limit:
        binding = [k for k, n in per_resource.items() if n == count]
        if binding:
            k = binding[0]
            reason = f"{k}: {totals.get(k, 0.0):g} in the cluster, {request.totals[k]:g} per trial"
        else:
            reason = (
                f"node boundaries: the totals hold {min(per_resource.values())} but the "
                f"bundles of one more trial do not fit on what the nodes have left "
                f"({request.strategy})"
            )
    return Fit(count, reason, per_resource, placements)


# --- memory ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryFit:
    """How many trials the nodes' declared memory holds at once, each of a trial's
    processes (one a bundle) holding ``per_process`` bytes."""

    per_process: float
    processes: int  # a trial's
    concurrent: int  # up to the limit asked for
    cluster: float  # bytes the nodes declare, in all
    largest_node: float

    @property
    def per_trial(self) -> float:
        return self.per_process * self.processes


def memory_fit(
    request: TrialRequest, cluster: Cluster, per_process: float, limit: int
) -> MemoryFit | None:
    """Places trials as ``concurrent_trials`` does, with each bundle's process also taking
    ``per_process`` bytes of its node's ``memory`` (what Ray declares: the node's memory
    less its object store). Ray itself reserves no memory for a trial: it places by CPU and
    GPU and its memory monitor kills workers once a node runs out. None when a node
    declares no memory (numbers given without it)."""
    if not cluster.nodes or any(n.resources.get("memory", 0.0) <= 0 for n in cluster.nodes):
        return None
    bundles = tuple(
        Bundle(b.role, {**b.resources, "memory": b.resources.get("memory", 0.0) + per_process})
        for b in request.bundles
    )
    fit = concurrent_trials(TrialRequest(bundles, request.strategy), cluster, limit)
    return MemoryFit(
        per_process=per_process,
        processes=len(bundles),
        concurrent=fit.concurrent,
        cluster=cluster.totals.get("memory", 0.0),
        largest_node=cluster.largest("memory"),
    )


def gb(size: float) -> str:
    return f"{size / 2**30:.1f} GB"


def unfit_reasons(request: TrialRequest, cluster: Cluster) -> list[str]:
    """Why one trial can never be placed on the cluster, with the numbers ([] if it fits)."""
    nodes = [n.resources for n in cluster.nodes]
    if place(request, nodes) is not None:
        return []
    totals, cluster_totals = request.totals, cluster.totals
    reasons = []
    for key, need in totals.items():
        have = cluster_totals.get(key, 0.0)
        if need > have + 1e-9:
            reasons.append(f"one trial needs {key} {need:g} and the cluster has {have:g} in total")
    if reasons:
        return reasons
    count = len(request.bundles)
    if request.strategy == "STRICT_PACK":
        biggest = max(cluster.nodes, key=lambda n: _size(_units(n.resources)))
        return [
            f"STRICT_PACK puts all {count} bundles ({fmt(totals)}) on one node, and no "
            f"node has that much (largest: {fmt(biggest.resources)})"
        ]
    if request.strategy == "STRICT_SPREAD" and count > len(nodes):
        return [
            f"STRICT_SPREAD puts each of the {count} bundles on a different node, and "
            f"the cluster has {len(nodes)} node{'s' if len(nodes) != 1 else ''}"
        ]
    for bundle in request.bundles:
        need_units = _units(bundle.resources)
        if not any(_fits(need_units, _units(n)) for n in nodes):
            biggest = max(cluster.nodes, key=lambda n: _size(_units(n.resources)))
            reasons.append(
                f"the {bundle.role} bundle ({fmt(bundle.resources)}) fits on no node "
                f"(largest: {fmt(biggest.resources)})"
            )
    if reasons:
        return reasons
    return [
        f"the {count} bundles ({fmt(totals)}) cannot be placed on the nodes' resources "
        f"under {request.strategy} (no assignment of bundles to nodes holds them all)"
    ]


def _size(units: Mapping[str, int]) -> tuple[int, int, int]:
    """Order of bundles and nodes: GPUs, then CPUs, then custom resources (not memory)."""
    other = sum(v for k, v in units.items() if k not in ("GPU", "CPU") and shown(k))
    return (units.get("GPU", 0), units.get("CPU", 0), other)
