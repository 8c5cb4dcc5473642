"""What ``benchmarks/population_scale.py`` watches while a population runs on the local
cluster (its trial processes' memory and CPU, Ray's placement of their bundles, the
machine's counters) and reads of the run afterwards (the long waits between a trial's
results, the clones of its lineage)."""

from __future__ import annotations

import bisect
import contextlib
import itertools
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from deploy.local_cluster import LocalCluster, processes

TRIAL_TITLE = b"ray::PPO"  # Ray's process title for the trainable's actor (and its tasks)


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float | None:
    """User and system CPU seconds of a live process so far (None: it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S


class Watch:
    """A thread that runs ``target`` while a ``with`` block runs: ``target`` waits on
    ``self._stop`` between its looks, which is set when the block ends."""

    def __init__(self, target: Callable[[], None]) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=target, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class TrialMemory(Watch):
    """Peak RSS of every live trial process, sampled in a thread until stopped; which raylet
    (node) each one belongs to, by parent process; and the CPU the cluster's processes used
    meanwhile, the trial processes apart from Ray's own (raylets, GCS, agents, idle
    workers). A process's CPU is its last sample's, so one that ends loses at most a
    period's worth."""

    def __init__(
        self, raylets: dict[int, str], cluster: LocalCluster, period_s: float = 0.5
    ) -> None:
        self.raylets = raylets
        self.cluster = cluster
        self.period_s = period_s
        self.peak_mb: dict[int, float] = {}
        self.node_of: dict[int, str] = {}
        self._cpu_at_start: dict[int, float] = {}
        self._cpu_last: dict[int, float] = {}
        # Each worker process's CPU seconds since it began, sampled: (wall time, CPU s).
        self.cpu_series: dict[int, list[tuple[float, float]]] = {}
        self.min_available_mb = math.inf  # the machine's MemAvailable, lowest sample
        self.own_cpu_s = 0.0  # the sampling thread's CPU, which is not the driver's work
        super().__init__(self._sample)

    def __enter__(self) -> Self:
        for pid in self.cluster.alive():
            cpu = _cpu_s(pid)
            if cpu is not None:
                self._cpu_at_start[pid] = cpu
        return super().__enter__()

    def __exit__(self, *_: object) -> None:
        super().__exit__()
        self._sample_cpu()

    def cpu_s(self) -> tuple[float, float]:
        """CPU seconds since the start: (the trial processes', the rest of the cluster's)."""
        trials = rest = 0.0
        for pid, cpu in self._cpu_last.items():
            used = cpu - self._cpu_at_start.get(pid, 0.0)
            if pid in self.peak_mb:
                trials += used
            else:
                rest += used
        return trials, rest

    def cpu_at(self, pid: int, when: float) -> float | None:
        """A worker process's CPU seconds since it began, at wall time ``when``
        (interpolated between the samples around it; None: not sampled on both sides)."""
        series = self.cpu_series.get(pid, [])
        k = bisect.bisect_right(series, (when, math.inf))
        if k == 0 or k == len(series):
            return None
        (t0, c0), (t1, c1) = series[k - 1], series[k]
        return c0 + (c1 - c0) * (when - t0) / (t1 - t0) if t1 > t0 else c0

    def _sample_cpu(self, table: dict[int, tuple[str, int, int]] | None = None) -> None:
        for pid in self.cluster.alive(table):
            cpu = _cpu_s(pid)
            if cpu is not None:
                self._cpu_last[pid] = cpu

    def _sample(self) -> None:
        # One scan of /proc a period, and only the raylets' children read, a trial's title
        # once (an idle worker takes the trial's title when the actor lands on it): the
        # sampler runs in the driver's process, on the cores the population shares.
        trials: set[int] = set()
        while not self._stop.wait(self.period_s):
            table = processes()
            self._sample_cpu(table)
            now = time.time()
            for pid, (_, parent, _) in table.items():
                # Every worker of the raylets, titled or not: a trial's title comes when its
                # algorithm is built, after most of its start.
                if parent in self.raylets and pid in self._cpu_last:
                    self.cpu_series.setdefault(pid, []).append((now, self._cpu_last[pid]))
            available = _proc_fields("/proc/meminfo").get("MemAvailable")  # kB
            if available is not None:
                self.min_available_mb = min(self.min_available_mb, available / 1024)
            for pid, (_, parent, _) in table.items():
                # A worker of the cluster's raylets (not, say, one of the probe's local Ray
                # still going down).
                if parent not in self.raylets:
                    continue
                if pid not in trials:
                    try:
                        title = Path(f"/proc/{pid}/cmdline").read_bytes()
                    except OSError:
                        continue
                    if not title.startswith(TRIAL_TITLE):
                        continue
                    trials.add(pid)
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                rss = next((ln for ln in status.splitlines() if ln.startswith("VmRSS:")), "")
                if not rss:
                    continue
                mb = int(rss.split()[1]) / 1024
                self.peak_mb[pid] = max(self.peak_mb.get(pid, 0.0), mb)
                self.node_of.setdefault(pid, self.raylets[parent])
        self.own_cpu_s = time.thread_time()


class PlacementWatch(Watch):
    """Ray's placement groups while the population runs, polled from its state API
    (``ray.util.placement_group_table``): the node of every bundle of every group created,
    at the moment the most groups were (the whole population placed at once). It stops
    polling once ``expected`` groups are placed (None: never)."""

    def __init__(
        self, labels: dict[str, str], period_s: float = 1.0, expected: int | None = None
    ) -> None:
        self.labels = labels  # Ray's node id -> the node's label (node_0, ...)
        self.period_s = period_s
        self.expected = expected
        self.groups: list[list[str]] = []
        self.own_cpu_s = 0.0  # the polling thread's CPU, which is not the driver's work
        super().__init__(self._poll)

    def _poll(self) -> None:
        import ray

        while not self._stop.wait(self.period_s):
            with contextlib.suppress(Exception):  # the cluster may be losing a node
                table = ray.util.placement_group_table()
                created = [g for g in table.values() if g["state"] == "CREATED"]
                if len(created) > len(self.groups):
                    self.groups = [
                        [self.labels.get(n, n) for _, n in sorted(g["bundles_to_node_id"].items())]
                        for g in created
                    ]
            if self.expected is not None and len(self.groups) >= self.expected:
                break
        self.own_cpu_s = time.thread_time()

    def bundles_per_node(self) -> dict[str, int]:
        counts = {label: 0 for label in sorted(self.labels.values())}
        for group in self.groups:
            for label in group:
                counts[label] = counts.get(label, 0) + 1
        return counts

    @property
    def spanning(self) -> int:
        return sum(len(set(group)) > 1 for group in self.groups)


class CheckpointFolders(Watch):
    """The most checkpoint folders each trial held at once, sampled every ``period_s``.
    The workbench prunes a trial's checkpoints to its newest ``checkpoint.keep`` after each
    one, but keeps those a clone, a trial or a resume still needs, and a folder whose save
    Tune dropped until it is older than every one kept (``workbench/tune_ext/
    checkpoints.py``), so a trial may hold more for a while."""

    def __init__(self, results_dir: Path, period_s: float = 2.0) -> None:
        self.results_dir = results_dir
        self.period_s = period_s
        self.peak: dict[str, int] = {}  # trial folder -> most checkpoint folders at once
        self.own_cpu_s = 0.0  # the sampling thread's CPU, which is not the driver's work
        super().__init__(self._sample)

    def _sample(self) -> None:
        while not self._stop.wait(self.period_s):
            self.look()
        self.own_cpu_s = time.thread_time()

    def look(self) -> None:
        with contextlib.suppress(OSError):  # a folder may go between the listing and the look
            for trial in self.results_dir.iterdir():
                if trial.is_dir():
                    held = sum(1 for _ in trial.glob("checkpoint_*"))
                    if held > self.peak.get(trial.name, 0):
                        self.peak[trial.name] = held


# Machine-wide counters read before and after a run: memory pressure (major page faults,
# pages the kernel scanned to reclaim, by kswapd and directly by a process that allocated)
# and context switches, to tell a crowded machine's CPU from a short-of-memory one's.
VMSTAT = ("pgmajfault", "pgscan_kswapd", "pgscan_direct")


def _proc_fields(path: str) -> dict[str, int]:
    """``name value`` lines of a /proc file (``name:`` in meminfo) as numbers; empty
    where it cannot be read."""
    out: dict[str, int] = {}
    try:
        for line in Path(path).read_text().splitlines():
            name, _, value = line.partition(" ")
            if value.split():
                out[name.rstrip(":")] = int(value.split()[0])
    except (OSError, ValueError):
        return {}
    return out


def machine_counters() -> dict[str, int]:
    """The VMSTAT counters of /proc/vmstat, /proc/stat's context switches (ctxt), and the
    microseconds some task waited on I/O (io_some_us, io_full_us: /proc/pressure/io)."""
    vmstat = _proc_fields("/proc/vmstat")
    counters = {name: vmstat[name] for name in VMSTAT if name in vmstat}
    ctxt = _proc_fields("/proc/stat").get("ctxt")
    if ctxt is not None:
        counters["ctxt"] = ctxt
    try:
        pressure = Path("/proc/pressure/io").read_text().splitlines()
    except OSError:
        pressure = []  # a kernel without pressure stall information
    for line in pressure:
        kind, *fields = line.split()
        total = dict(f.split("=", 1) for f in fields).get("total")
        if total is not None:
            counters[f"io_{kind}_us"] = int(total)
    return counters


def long_waits(
    trials: dict[str, list[dict[str, Any]]], started_at: float, at_least_s: float = 10.0
) -> list[tuple[float, float, str, int, int]]:
    """Each wait between a trial's results of ``at_least_s`` or more, less the second
    result's own iteration, in the order they ended: (seconds into fit() it ended, the
    wait, the trial, the iteration before, the iteration after: a PBT clone's jumps). A
    stall of the whole population shows as many of them ending together."""
    waits = []
    for name, rows in trials.items():
        for before, after in itertools.pairwise(rows):
            wait = (
                float(after["timestamp"])
                - float(before["timestamp"])
                - float(after["time_this_iter_s"])
            )
            if wait >= at_least_s:
                waits.append(
                    (
                        float(after["timestamp"]) - started_at,
                        wait,
                        name,
                        int(before["training_iteration"]),
                        int(after["training_iteration"]),
                    )
                )
    return sorted(waits)


def node_labels() -> dict[str, str]:
    """Ray's node id -> the custom resource that labels the node (deploy/local_cluster.py)."""
    import ray

    return {
        n["NodeID"]: next((k for k in n["Resources"] if k.startswith("node_")), n["NodeID"][:8])
        for n in ray.nodes()
        if n.get("Alive")
    }


def clone_jumps(results_dir: Path) -> dict[str, int]:
    """The population's clones by where they moved the target (its lineage): ahead to a
    donor further on, back to one behind it, or to the same iteration; and the iterations
    they skipped, net (the train() calls they saved)."""
    from workbench.analysis.lineage import read_jsonl
    from workbench.names import LINEAGE_FILE

    lineage = results_dir / LINEAGE_FILE
    out = {"clones": 0, "ahead": 0, "back": 0, "same": 0, "net_skipped": 0}
    for record in read_jsonl(lineage) if lineage.exists() else []:
        # From the iteration of the result the exploit was decided on: Tune's
        # target_iteration is the result before it.
        jump = record.restored_from - record.stopped_at
        out["clones"] += 1
        out["ahead" if jump > 0 else "back" if jump < 0 else "same"] += 1
        out["net_skipped"] += jump
    return out
