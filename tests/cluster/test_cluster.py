"""A real two-node Ray cluster on this machine: `workbench plan --address` reads it and
`workbench run --address` trains a small population on it, with SPREAD putting each
trial's env runners on both nodes (read from the actors' node ids in Ray's actor table);
the drills: a worker node lost mid-run, and the driver killed mid-run then `workbench
resume --address` on the same cluster.

The nodes are `ray start` processes on loopback (deploy/local_cluster.py, what `make
cluster-up` runs), told apart by a custom resource (node_0 on the head, node_1... on the
workers) and their CPU counts. Every port is chosen free and the cluster's temp dir is its
own, so other Ray instances on the machine are not touched; the fixture stops exactly the
processes it started (and their children) and checks that none is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.local_cluster import LocalCluster
from tests.support.experiments import small_pbt, tiny_ppo, write_experiment

BIN = Path(sys.executable).parent
# The actor table (Ray's GCS; the state API would need the dashboard, which a minimal
# Ray lacks): for each trial's algorithm actor, the custom resource of the node each
# actor it owns (its env runners) runs on.
ACTORS_BY_TRIAL = """
import json, sys
import ray
from ray._private import state
ray.init(address=sys.argv[1], log_to_driver=False)
# A node that has left the cluster is listed with no resources: no label, no actors.
label = {n["NodeID"]: next(k for k in n["Resources"] if k.startswith("node_"))
         for n in ray.nodes() if n["Alive"]}
actors = state.actors().values()
where = lambda address: (address["IPAddress"], address["Port"])
by_address = {where(a["Address"]): a for a in actors}
trials = {}
for actor in actors:
    owner = by_address.get(where(actor["OwnerAddress"]))
    if owner is not None and owner["ActorClassName"] == sys.argv[2]:
        trials.setdefault(owner["ActorID"], []).append(
            [actor["ActorClassName"], label.get(actor["Address"]["NodeID"], "gone"),
             actor["StartTime"]])
print(json.dumps(trials))
"""


def _two_nodes() -> Iterator[LocalCluster]:
    """node_0, the head, with 2 CPUs; node_1, a worker, with 3."""
    cluster = LocalCluster(cpus=[2, 3], ray=str(BIN / "ray"))
    try:
        cluster.up()
        yield cluster
    finally:
        left = cluster.stop()
        assert not left, f"processes of the test cluster left running: {sorted(left)}"


# The lost-node drill kills a node: a cluster of its own, stopped before the next test.
two_nodes_to_break = pytest.fixture(name="two_nodes_to_break")(_two_nodes)
# One cluster for the tests after it, which leave it whole, in this order: the population
# on two nodes (it reads every PPO actor the cluster has had), then the killed driver
# (which reads the live ones). Starting and stopping a cluster is 15 s of a busy CI.
two_nodes = pytest.fixture(name="two_nodes", scope="module")(_two_nodes)


def _experiment(tmp_path: Path) -> Path:
    data = tiny_ppo(
        tmp_path,
        name="two_nodes",
        training={"train_batch_size_per_learner": 256, "minibatch_size": 128, "num_epochs": 1},
        population=2,
        stop={"iterations": 2},
        checkpoint={"frequency": 1, "keep": 3},
        tracking={"enabled": False},
        # Bundles: the main process CPU 0.5 and two runners of CPU 1. SPREAD puts the
        # largest bundles on different nodes first: one runner on each.
        resources={
            "cpus_main": 0.5,
            "cpus_per_learner": 0.5,
            "env_runners": {"count": 2, "cpus_each": 1, "envs_per_runner": 4},
            "placement_strategy": "SPREAD",
        },
    )
    return write_experiment(tmp_path / "two_nodes.yaml", data)


def test_a_lost_worker_node_leaves_the_population_finishing_on_the_head(
    two_nodes_to_break: LocalCluster, tmp_path: Path
) -> None:
    """The resume drill on a cluster: the worker node's raylet is SIGKILLed mid-run;
    the trials it held fail and are retried from their checkpoints on the head."""
    from mlflow.tracking import MlflowClient

    data = tiny_ppo(
        tmp_path,
        name="drill",
        # Iterations of about a second: the kill comes while both trials train. (RLlib's
        # 256x256 networks: on the small-env 64x64 ones with the lean learner all 20
        # iterations took 8 s and the trial on the lost node finished before its
        # processes saw the raylet go.)
        training={"train_batch_size_per_learner": 1000, "minibatch_size": 128, "num_epochs": 2},
        defaults="rllib",
        scheduler={"type": "fifo"},
        population=2,
        stop={"iterations": 30},
        checkpoint={"frequency": 1, "keep": 3},
        failure={"max_failures": 3},
        # 1.5 CPUs a trial: the head (2 CPUs) holds one, so while both run at once
        # at least one is on the worker node (3 CPUs).
        resources={"cpus_main": 1.5, "cpus_per_learner": 1.5},
    )
    file = write_experiment(tmp_path / "drill.yaml", data)
    results = tmp_path / "results" / "drill"
    log = tmp_path / "drill.log"
    with log.open("w") as sink:
        driver = subprocess.Popen(
            [
                str(BIN / "workbench"),
                "run",
                str(file),
                "--name",
                "drill",
                "--address",
                two_nodes_to_break.address,
            ],
            env=two_nodes_to_break.env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            rows = {
                f.parent.name: len(f.read_text().splitlines())
                for f in results.glob("*/result.json")
            }
            if len(rows) == 2 and min(rows.values()) >= 2:
                break
            assert driver.poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)
        else:
            pytest.fail("the population never got going")
        nodes = _trial_nodes(two_nodes_to_break)
        assert "node_1" in nodes, nodes  # a trial on the node about to go
        os.kill(two_nodes_to_break.raylet(two_nodes_to_break.nodes[1]), signal.SIGKILL)
        driver.wait(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    out = log.read_text()
    assert driver.returncode == 0, out[-3000:]
    assert "Experiment drill: 2 trials, 0 errored" in out
    trials = {
        f.parent.name: [json.loads(line) for line in f.read_text().splitlines()]
        for f in results.glob("*/result.json")
    }
    assert all(rows[-1]["training_iteration"] == 30 for rows in trials.values())
    # The lost trial went on from a checkpoint, in a new process on the head.
    restored = [
        name
        for name, rows in trials.items()
        if any(r["iterations_since_restore"] < r["training_iteration"] for r in rows)
    ]
    assert restored, "no trial was restored: the worker node held none"
    client = MlflowClient(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    runs = {
        r.info.run_name: r
        for r in client.search_runs(
            [client.get_experiment_by_name("drill").experiment_id],
            filter_string="tags.`workbench.role` = 'trial'",
        )
    }
    assert all(r.info.status == "FINISHED" for r in runs.values())
    for name in restored:
        assert int(runs[name].data.tags["workbench.failures"]) >= 1


def test_a_population_trains_on_two_nodes_with_each_trials_runners_on_both(
    two_nodes: LocalCluster, tmp_path: Path
) -> None:
    file = _experiment(tmp_path)
    env = two_nodes.env

    planned = subprocess.run(
        [str(BIN / "workbench"), "plan", str(file), "--address", two_nodes.address, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert planned.returncode == 0, planned.stderr[-3000:]
    plan = json.loads(planned.stdout)
    assert sorted(n["resources"].get("CPU") for n in plan["cluster"]["nodes"]) == [2.0, 3.0]
    assert plan["strategy"] == "SPREAD" and plan["per_trial"] == {"CPU": 2.5}
    assert (plan["concurrent"], plan["waves"]) == (2, 1)

    done = subprocess.run(
        [
            str(BIN / "workbench"),
            "run",
            str(file),
            "--name",
            "two_nodes",
            "--address",
            two_nodes.address,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Experiment two_nodes: 2 trials, 0 errored" in done.stdout
    assert "Plan: one trial = CPU 2.5 (3 bundles, SPREAD); 2 of 2 trials at once" in done.stdout
    # Both nodes are this machine: the pre-flight saw them share the results folder.
    assert "is not shared" not in done.stderr

    actors = subprocess.run(
        [sys.executable, "-c", ACTORS_BY_TRIAL, two_nodes.address, "PPO"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert actors.returncode == 0, actors.stderr[-3000:]
    trials = json.loads(actors.stdout.strip().splitlines()[-1])
    assert len(trials) == 2, trials
    for owned in trials.values():
        # A trial actor that Tune reused for another start (reuse_actors) built the
        # algorithm again, with two new runners: each build's pair, by start time.
        runners = sorted((t, node) for cls, node, t in owned if cls.endswith("EnvRunner"))
        assert runners and len(runners) % 2 == 0, owned
        for build in range(0, len(runners), 2):
            pair = [node for _, node in runners[build : build + 2]]
            assert sorted(pair) == ["node_0", "node_1"], owned


# The node (by its custom resource) of each live trial actor of a class.
TRIAL_NODES = """
import json, sys
import ray
from ray._private import state
ray.init(address=sys.argv[1], log_to_driver=False)
# A node that has left the cluster is listed with no resources: no label, no actors.
label = {n["NodeID"]: next(k for k in n["Resources"] if k.startswith("node_"))
         for n in ray.nodes() if n["Alive"]}
print(json.dumps(sorted(label[a["Address"]["NodeID"]] for a in state.actors().values()
                        if a["ActorClassName"] == sys.argv[2] and a["State"] == "ALIVE")))
"""


def test_a_killed_driver_resumes_on_the_cluster_with_nothing_lost(
    two_nodes: LocalCluster, tmp_path: Path
) -> None:
    """The driver of `workbench run --address` is SIGKILLed while a PBT population trains
    on both nodes; Ray ends the dead driver's trial actors, and `workbench resume
    --address` finishes the population on the same cluster: every trial to its stop rule,
    one MLflow run each with no gap in its steps, a lineage without a hole, and the
    cluster's own processes untouched (a joined cluster is not the resume's to clean up)."""
    from mlflow.tracking import MlflowClient

    from tests.support.results import result_rows
    from workbench.analysis.lineage import check_sequence, read_jsonl
    from workbench.names import LINEAGE_FILE

    iterations = 30
    data = small_pbt(
        tmp_path,
        search_space={"params": {"lr": {"loguniform": [1e-5, 1e-2]}}},
        population=2,
        # Iterations of about a second, so that the kill comes while both train.
        training={"train_batch_size_per_learner": 1000, "minibatch_size": 250, "num_epochs": 2},
        stop={"iterations": iterations},
        # 1.5 CPUs a trial: the head (2 CPUs) holds one, the worker (3) the other.
        resources={"cpus_main": 1.5, "cpus_per_learner": 1.5, "envs_per_runner": 4},
    )
    file = write_experiment(tmp_path / "pop.yaml", data)
    results = tmp_path / "results" / "pop"
    command = [str(BIN / "workbench"), "run", str(file), "--name", "pop"]
    command += ["--address", two_nodes.address]
    with (tmp_path / "run.log").open("w") as sink:
        driver = subprocess.Popen(
            command, env=two_nodes.env, stdout=sink, stderr=subprocess.STDOUT, cwd=tmp_path
        )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            rows = (
                {name: len(r) for name, r in result_rows(results).items()}
                if results.is_dir()
                else {}
            )
            exploited = (results / LINEAGE_FILE).exists()
            if len(rows) == 2 and min(rows.values()) >= 3 and exploited:
                break
            assert driver.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
            time.sleep(0.5)
        else:
            pytest.fail("the population never got going")
        placed = _trial_nodes(two_nodes)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    # One trial on each node when the driver died.
    assert placed == ["node_0", "node_1"]
    before = {name: len(r) for name, r in result_rows(results).items()}
    raylets = {node.name: two_nodes.raylet(node) for node in two_nodes.nodes}
    exploits_before = len(read_jsonl(results / LINEAGE_FILE))

    resumed = subprocess.run(
        [str(BIN / "workbench"), "resume", str(results), "--address", two_nodes.address],
        env=two_nodes.env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        cwd=tmp_path,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "Experiment pop: 2 trials, 0 errored" in resumed.stdout
    assert "left behind by the interrupted driver" not in resumed.stdout
    # The cluster lives on: the same raylets, nothing of it stopped by the resume.
    assert {node.name: two_nodes.raylet(node) for node in two_nodes.nodes} == raylets

    rows = result_rows(results)
    assert sorted(rows) == sorted(before)
    for name, trial_rows in rows.items():
        assert trial_rows[-1]["training_iteration"] == iterations, name
        if before[name] < iterations:  # it was training at the kill: restored, not restarted
            after = trial_rows[before[name] :]
            assert after and after[0]["iterations_since_restore"] == 1, name
            assert after[0]["training_iteration"] > 1, name
    records = read_jsonl(results / LINEAGE_FILE)
    assert check_sequence(records) == []
    assert len(records) >= exploits_before

    client = MlflowClient(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("pop")
    runs = client.search_runs([experiment.experiment_id])
    trials = [r for r in runs if r.data.tags.get("workbench.role") == "trial"]
    assert sorted(r.info.run_name for r in trials) == sorted(rows)
    assert all(r.info.status == "FINISHED" for r in runs)
    for run in trials:
        history = client.get_metric_history(run.info.run_id, "training_iteration")
        steps = sorted(m.step for m in history)
        assert steps == list(range(1, len(steps) + 1)), run.info.run_name
        assert max(history, key=lambda m: m.step).value == iterations


def _trial_nodes(cluster: LocalCluster) -> list[str]:
    """The nodes (by their custom resource) of the live PPO trial actors, sorted."""
    placed = subprocess.run(
        [sys.executable, "-c", TRIAL_NODES, cluster.address, "PPO"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert placed.returncode == 0, placed.stderr[-3000:]
    nodes: list[str] = json.loads(placed.stdout.strip().splitlines()[-1])
    return nodes
