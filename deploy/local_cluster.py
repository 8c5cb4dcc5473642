"""A Ray cluster of several nodes on this machine, started the way an operator starts one:
`ray start --head` and `ray start --address ...` for each worker, on loopback, each node with
its own CPUs, memory and a custom resource naming it (``node_0`` on the head, ``node_1``...
on the workers). The nodes share this machine's memory: each declares its share (by default
70% of the memory available at start, split evenly; Ray's object stores take the rest),
so that `workbench plan` counts the memory there is, not one machine's worth per node.
For trying an experiment file against a cluster before moving it to KubeRay
(docs/resources.md), and for the cluster tests.

Usage::

    python deploy/local_cluster.py up --nodes 4 --cpus 1           # prints the address
    workbench run experiments/cartpole_pbt.yaml --address 127.0.0.1:PORT
    python deploy/local_cluster.py status
    python deploy/local_cluster.py down

(`make cluster-up` and `make cluster-down` run these with the project's virtualenv.)

Every port is chosen free at start and the cluster has a temp dir of its own, so another
Ray on the machine is not touched; ``down`` stops exactly the processes ``up`` started (the
daemons keep the process group of the ``ray start`` that launched them) and their children,
SIGTERM first, then SIGKILL. What ``up`` started is written to a state file (default
``.cluster/local_cluster.json``), which ``status`` and ``down`` read.

Standard library only: it runs with any Python that can reach the ``ray`` command.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE = Path(".cluster") / "local_cluster.json"
# `ray start` flags for the ports a node listens on (each chosen free, so that several
# nodes and other Ray instances share the loopback address).
NODE_PORT_FLAGS = (
    "node-manager-port",
    "object-manager-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "metrics-export-port",
    "runtime-env-agent-port",
)


def free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def available_memory() -> int:
    """Bytes of memory available now (/proc/meminfo's MemAvailable; 0 where there is none:
    the nodes then take Ray's default)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        lines = Path("/proc/meminfo").read_text().splitlines()
        line = next(ln for ln in lines if ln.startswith("MemAvailable:"))
        return int(line.split()[1]) * 1024
    return 0


def processes() -> dict[int, tuple[str, int, int]]:
    """pid -> (state, parent pid, process group), from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        table[int(entry)] = (fields[0], int(fields[1]), int(fields[2]))
    return table


def in_groups(groups: set[int], table: dict[int, tuple[str, int, int]] | None = None) -> set[int]:
    """Live processes in these process groups, and all their descendants (``table``: a
    scan of ``processes()`` already made)."""
    table = processes() if table is None else table
    found = {pid for pid, (_, _, group) in table.items() if group in groups}
    grew = True
    while grew:
        grew = False
        for pid, (_, parent, _) in table.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    return {pid for pid in found if pid in table and table[pid][0] != "Z"}


@dataclass
class Node:
    """One `ray start`: its name (the custom resource that labels it), CPUs and ports."""

    name: str
    cpus: float
    ports: dict[str, int]
    group: int = 0  # the process group of its `ray start` (0: not started)
    memory: int = 0  # bytes it declares (0: Ray's default, the machine's available memory)

    def args(self, head_address: str | None, head_port: int, temp_dir: str) -> list[str]:
        role = (
            [
                "--head",
                f"--port={head_port}",
                f"--temp-dir={temp_dir}",
                "--include-dashboard=false",
                f"--dashboard-port={self.ports['dashboard-port']}",
            ]
            if head_address is None
            else [f"--address={head_address}"]
        )
        return [
            *role,
            f"--num-cpus={self.cpus:g}",
            *([f"--memory={self.memory}"] if self.memory else []),
            f"--resources={json.dumps({self.name: 1})}",
            *(f"--{flag}={self.ports[flag]}" for flag in NODE_PORT_FLAGS),
            "--node-ip-address=127.0.0.1",
            "--disable-usage-stats",
        ]


@dataclass
class LocalCluster:
    """A head and workers on loopback (``cpus``: one figure a node, the head's first)."""

    cpus: list[float]
    memory_gb: list[float] | None = None  # a node's, head first; None: a share each
    ray: str = "ray"  # the `ray` command (the project's virtualenv's, by default the PATH's)
    temp_dir: str = ""
    head_port: int = 0
    nodes: list[Node] = field(default_factory=list)
    # Processes seen while the cluster ran: a daemon that left its group still goes down.
    seen: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.nodes:
            ports = free_ports(1 + (len(NODE_PORT_FLAGS) + 1) * len(self.cpus))
            self.head_port = ports.pop()
            if self.memory_gb is not None:
                memory = [round(gb * 2**30) for gb in self.memory_gb]
            else:
                memory = [round(0.7 * available_memory() / len(self.cpus))] * len(self.cpus)
            for i, cpus in enumerate(self.cpus):
                names = ("dashboard-port", *NODE_PORT_FLAGS)
                own = {name: ports.pop() for name in names}
                self.nodes.append(Node(f"node_{i}", cpus, own, memory=memory[i]))
        if not self.temp_dir:
            # A short path: Ray's Unix sockets live under it (107 characters at most).
            self.temp_dir = tempfile.mkdtemp(prefix="wbray-", dir="/tmp")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.head_port}"

    @property
    def env(self) -> dict[str, str]:
        """The environment its processes and its clients run with: token auth off (the
        head switches it on by itself when ~/.ray/auth_token exists and a joining worker
        does not; loopback only), no usage stats, no inherited RAY_ADDRESS."""
        env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
        env.pop("RAY_ADDRESS", None)
        return env

    def start(self, node: Node) -> None:
        """`ray start` of one node, in a session of its own: the daemons it leaves keep
        that process group, which is how ``stop`` finds them."""
        head = None if node is self.nodes[0] else self.address
        starter = subprocess.Popen(
            [self.ray, "start", *node.args(head, self.head_port, self.temp_dir)],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        node.group = starter.pid
        out, _ = starter.communicate(timeout=180)
        if starter.returncode != 0:
            raise RuntimeError(f"`ray start` of {node.name} failed:\n{out[-3000:]}")
        self.remember()

    def up(self) -> None:
        try:
            for node in self.nodes:
                self.start(node)
        except BaseException:
            self.stop()
            raise

    def groups(self) -> set[int]:
        return {node.group for node in self.nodes if node.group}

    def remember(self) -> None:
        self.seen = sorted(set(self.seen) | in_groups(self.groups()))

    def alive(self, table: dict[int, tuple[str, int, int]] | None = None) -> set[int]:
        table = processes() if table is None else table
        pids = {p for p in self.seen if p in table and table[p][0] != "Z"}
        return pids | in_groups(self.groups(), table)

    def raylet(self, node: Node) -> int:
        """The raylet process of a node (a drill kills it to lose the node)."""
        port = node.ports["node-manager-port"]
        for pid in sorted(in_groups({node.group})):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            flag = f"--node_manager_port={port}".encode()
            if cmdline and cmdline[0].endswith(b"raylet") and flag in cmdline:
                return pid
        raise LookupError(f"no raylet of {node.name} (node manager port {port})")

    def stop(self) -> list[int]:
        """Stops every process of the cluster; returns those still alive (none, we hope).
        The temp dir goes with it."""
        self.remember()  # now, while the raylets live: trial workers are their children
        for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            for pid in self.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait_s
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.2)
        left = sorted(self.alive())
        if not left:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        return left

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> LocalCluster:
        data = json.loads(path.read_text())
        data["nodes"] = [Node(**node) for node in data["nodes"]]
        return cls(**data)


def _per_node(text: str, nodes: int) -> list[float] | None:
    """Figures a node from ``--cpus`` or ``--memory`` (None: not one figure, or one a
    node, each > 0)."""
    try:
        figures = [float(x) for x in text.split(",")]
    except ValueError:
        return None
    if len(figures) == 1:
        figures *= nodes
    if len(figures) != nodes or any(not c > 0 for c in figures):
        return None
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--nodes", type=int, default=4, help="head included (default 4)")
    parser.add_argument(
        "--cpus", default="1", help="CPUs a node: one figure, or one a node, head first"
    )
    parser.add_argument(
        "--memory",
        help="GB of memory a node declares: one figure, or one a node, head first "
        "(default: 70%% of what is available, split evenly)",
    )
    parser.add_argument("--state", type=Path, default=STATE, help=f"default {STATE}")
    parser.add_argument("--ray", default=str(Path(sys.executable).parent / "ray"))
    args = parser.parse_args(argv)

    if args.command == "up":
        if args.state.exists():
            print(f"{args.state}: a cluster is up already (`down` first)", file=sys.stderr)
            return 2
        if args.nodes < 1:
            print(f"--nodes {args.nodes}: at least 1 (the head)", file=sys.stderr)
            return 2
        cpus = _per_node(args.cpus, args.nodes)
        if cpus is None:
            print(
                f"--cpus {args.cpus!r}: one figure, or one a node ({args.nodes}, the head "
                "first), each above 0, e.g. 1 or 2,1,1,1",
                file=sys.stderr,
            )
            return 2
        memory = None
        if args.memory is not None:
            memory = _per_node(args.memory, args.nodes)
            if memory is None:
                print(
                    f"--memory {args.memory!r}: GB, one figure, or one a node ({args.nodes}, "
                    "the head first), each above 0, e.g. 4 or 8,4,4,4",
                    file=sys.stderr,
                )
                return 2
        cluster = LocalCluster(cpus=cpus, memory_gb=memory, ray=args.ray)
        cluster.up()
        cluster.save(args.state)
        names = ", ".join(
            f"{n.name} ({n.cpus:g} CPU, {n.memory / 2**30:.1f} GB)" for n in cluster.nodes
        )
        print(f"Ray cluster up: {len(cluster.nodes)} nodes, {names}")
        print(f"address {cluster.address}; RAY_AUTH_MODE=disabled for clients")
        print(f"  workbench run FILE --address {cluster.address}")
        return 0
    if not args.state.exists():
        print(f"{args.state}: no cluster (nothing to do)")
        return 0
    cluster = LocalCluster.load(args.state)
    if args.command == "status":
        alive = cluster.alive()
        print(f"address {cluster.address}: {len(alive)} processes of the cluster alive")
        for node in cluster.nodes:
            try:
                state = f"raylet pid {cluster.raylet(node)}"
            except LookupError:
                state = "raylet gone"
            print(f"  {node.name}: {node.cpus:g} CPU, {node.memory / 2**30:.1f} GB, {state}")
        return 0
    left = cluster.stop()
    if left:
        print(f"processes of the cluster still alive: {left}", file=sys.stderr)
        return 1
    args.state.unlink()
    print(f"Ray cluster at {cluster.address} down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
