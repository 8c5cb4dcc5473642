"""deploy/kuberay: the manifests against KubeRay's own CRD schemas, the entrypoint's
run-or-resume behaviour, and the pods against `workbench plan` of the experiment they run.

KubeRay's published CRDs (API ray.io/v1) are read from $WORKBENCH_KUBERAY_CRDS, else from
the folder the CI machine lays beside the repository (crds_folder); where they are not, the
tests that need them skip, or fail under CI. They are validated the way the API server
applies a structural schema: unknown fields are pruned (an error under kubectl's default
strict field validation), ``x-kubernetes-int-or-string`` takes either, int32/int64 formats
are range-checked, list-map keys must be unique, and CEL rules are not evaluated here (a
manifest that reaches one fails, so that it cannot pass unchecked). No cluster, no Ray.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from workbench.experiment.resolve import load_and_resolve
from workbench.plan.capacity import make_plan
from workbench.plan.resources import Cluster, Node, fmt

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kuberay"


CRDS_VARIABLE = "WORKBENCH_KUBERAY_CRDS"
CRD_FILES = ("ray.io_rayjobs.yaml", "ray.io_rayclusters.yaml")


def crds_folder() -> Path:
    """Where KubeRay's CRDs are read from: $WORKBENCH_KUBERAY_CRDS, else the CRD folder CI
    lays beside the repository (reference data, not copied into it)."""
    configured = os.environ.get(CRDS_VARIABLE)
    return Path(configured) if configured else ROOT.parent / "shared" / "kuberay-crds"


def find_crds() -> Path:
    """The CRD folder; without it the calling test skips, or fails under CI (a build
    that checks nothing must not pass), saying what is missing and how to point at it."""
    folder = crds_folder()
    missing = [name for name in CRD_FILES if not (folder / name).is_file()]
    if not missing:
        return folder
    message = (
        f"KubeRay's CRDs are missing: no {', '.join(missing)} in {folder}. Point the tests "
        f"at KubeRay's CRD folder (ray-operator/config/crd/bases in a KubeRay checkout, "
        f"API ray.io/v1) with {CRDS_VARIABLE}=/path/to/crds"
    )
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


# The image puts the repository at /app (deploy/kuberay/Dockerfile).
IMAGE_ROOT = "/app"

# ObjectMeta at the top level: the API server checks it itself (the CRD says only "object").
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_OBJECT_META = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 63, "pattern": _DNS_SUBDOMAIN},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["name"],
    "additionalProperties": False,
}
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def structural(node: Any) -> Any:
    """A CRD's OpenAPI v3 schema as a JSON Schema that rejects what the API server would
    prune or refuse."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: structural(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = structural(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [structural(v) for v in value]
        elif key == "nullable":
            continue
        elif key == "x-kubernetes-validations":
            out["celRules"] = [rule["rule"] for rule in value]
        elif key == "x-kubernetes-list-type" and value in ("map", "set"):
            out["uniqueBy"] = node.get("x-kubernetes-list-map-keys") or []
        elif key.startswith("x-kubernetes-"):
            continue
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if (
        node.get("type") == "object"
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _unique_by(validator: Any, keys: list[str], instance: Any, schema: Any) -> Any:
    if not isinstance(instance, list):
        return
    seen = set()
    for item in instance:
        key = (
            tuple(str(item.get(k)) for k in keys) if keys and isinstance(item, dict) else str(item)
        )
        if key in seen:
            yield jsonschema.ValidationError(f"duplicate entry {key} in a list-map/set")
        seen.add(key)


def _cel_rules(validator: Any, rules: list[str], instance: Any, schema: Any) -> Any:
    yield jsonschema.ValidationError(
        f"CEL rules {rules} are not evaluated by this test; extend it before using this field"
    )


def _format(validator: Any, form: str, instance: Any, schema: Any) -> Any:
    bounds = _INT_RANGES.get(form)
    if bounds and isinstance(instance, int) and not bounds[0] <= instance <= bounds[1]:
        yield jsonschema.ValidationError(f"{instance} is out of {form} range")


KubeValidator = jsonschema.validators.extend(
    jsonschema.Draft7Validator,
    {"uniqueBy": _unique_by, "celRules": _cel_rules, "format": _format},
)


@functools.cache
def crd_validator(crds: Path, kind: str) -> Any:
    # The C loader: the CRDs are 1-1.4 MB of YAML.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((crds / f"ray.io_{kind.lower()}s.yaml").read_text(), Loader=loader)
    assert crd["spec"]["names"]["kind"] == kind
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert version["served"] and version["storage"]
    schema = structural(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = _OBJECT_META
    schema["properties"]["apiVersion"] = {"const": "ray.io/v1"}
    schema["properties"]["kind"] = {"const": kind}
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    return KubeValidator(schema)


def schema_errors(kind: str, document: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in crd_validator(find_crds(), kind).iter_errors(document)
    ]


def load(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((DEPLOY / name).read_text())
    return document


# --- where the CRDs are ----------------------------------------------------------------------


def test_the_crds_are_read_from_the_folder_the_variable_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in CRD_FILES:
        (tmp_path / name).write_text("kind: CustomResourceDefinition\n")
    monkeypatch.setenv(CRDS_VARIABLE, str(tmp_path))
    monkeypatch.setenv("CI", "true")
    assert find_crds() == tmp_path


def test_without_the_crds_a_developer_s_run_skips_saying_how_to_point_at_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No variable: the folder beside the repository, here a repository without one.
    monkeypatch.delenv(CRDS_VARIABLE, raising=False)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path / "repository")
    with pytest.raises(pytest.skip.Exception) as info:
        find_crds()
    message = str(info.value)
    assert f"no ray.io_rayjobs.yaml, ray.io_rayclusters.yaml in {crds_folder()}" in message
    assert crds_folder() == tmp_path / "shared" / "kuberay-crds"
    assert f"{CRDS_VARIABLE}=/path/to/crds" in message


def test_without_the_crds_a_ci_run_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ray.io_rayjobs.yaml").write_text("kind: CustomResourceDefinition\n")
    monkeypatch.setenv(CRDS_VARIABLE, str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as info:
        find_crds()
    message = str(info.value)
    assert f"no ray.io_rayclusters.yaml in {tmp_path}" in message
    assert f"{CRDS_VARIABLE}=/path/to/crds" in message


# --- the manifests against the CRDs ----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind"), [("rayjob.yaml", "RayJob"), ("raycluster.yaml", "RayCluster")]
)
def test_the_manifests_are_valid_kuberay_objects(name: str, kind: str) -> None:
    document = load(name)
    assert document["kind"] == kind
    assert schema_errors(kind, document) == []


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda d: d["spec"].update(backofLimit=2), "'backofLimit' was unexpected"),
        (lambda d: d["spec"].update(backoffLimit="two"), "is not of type 'integer'"),
        (lambda d: d["spec"].update(backoffLimit=2**31), "out of int32 range"),
        (
            lambda d: _head_container(d)["resources"]["limits"].update(cpu="two"),
            "does not match",
        ),
        (lambda d: _head_container(d).update(imagePullPolicy=None), "is not of type 'string'"),
        (
            lambda d: d["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].pop("groupName"),
            "'groupName' is a required property",
        ),
        (
            lambda d: _head_container(d)["ports"].append(
                copy.deepcopy(_head_container(d)["ports"][0])
            ),
            "duplicate entry",
        ),
        (lambda d: d["spec"].update(managedBy="me"), "CEL rules"),
        (lambda d: d["metadata"].update(name="Cartpole_PBT"), "does not match"),
    ],
    ids=[
        "misspelt field",
        "wrong type",
        "int32 overflow",
        "bad quantity",
        "null where a string is",
        "missing required",
        "duplicate list-map key",
        "field with CEL rules",
        "bad object name",
    ],
)
def test_the_schema_check_catches_what_the_api_server_would(edit: Any, fragment: str) -> None:
    # The validator itself: each of these must fail, or the test above proves nothing.
    document = load("rayjob.yaml")
    edit(document)
    errors = schema_errors("RayJob", document)
    assert any(fragment in e for e in errors), errors


def test_quantities_may_be_numbers_or_strings() -> None:
    document = load("rayjob.yaml")
    _head_container(document)["resources"]["limits"]["cpu"] = 2
    _head_container(document)["resources"]["requests"]["cpu"] = "1500m"
    assert schema_errors("RayJob", document) == []


def test_the_interactive_cluster_is_the_jobs_cluster() -> None:
    assert load("raycluster.yaml")["spec"] == load("rayjob.yaml")["spec"]["rayClusterSpec"]


def _head_container(document: dict[str, Any]) -> dict[str, Any]:
    spec = document["spec"].get("rayClusterSpec", document["spec"])
    container: dict[str, Any] = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    return container


def _pod_specs(cluster_spec: dict[str, Any]) -> list[tuple[str, dict[str, Any], int]]:
    """(group, pod spec, replicas) for the head and each worker group."""
    out = [("head", cluster_spec["headGroupSpec"], 1)]
    out += [(g["groupName"], g, int(g["replicas"])) for g in cluster_spec["workerGroupSpecs"]]
    return out


# --- the run it starts ----------------------------------------------------------------------


def entrypoint() -> tuple[Path, Path, Path]:
    """(script, experiment file, results dir) of the RayJob's entrypoint, in this checkout."""
    words = shlex.split(load("rayjob.yaml")["spec"]["entrypoint"])
    assert words[0] == "bash" and len(words) == 4, words
    local = [ROOT / Path(w).relative_to(IMAGE_ROOT) for w in words[1:3]]
    return local[0], local[1], Path(words[3])


def test_the_job_runs_the_gpu_experiment_into_the_shared_volume_and_retries() -> None:
    job = load("rayjob.yaml")
    script, experiment_file, results = entrypoint()
    assert script == DEPLOY / "entrypoint.sh" and script.is_file()
    assert experiment_file == ROOT / "experiments" / "cartpole_pbt_gpu.yaml"
    assert job["spec"]["backoffLimit"] >= 1
    assert job["spec"].get("submissionMode", "K8sJobMode") == "K8sJobMode"

    exp = load_and_resolve(experiment_file, check_results=False).experiment
    storage = Path(exp.storage)
    assert results.parent == storage, "the results folder must be on the experiment's storage"
    pvc = yaml.safe_load((DEPLOY / "pvc.yaml").read_text())
    assert pvc["kind"] == "PersistentVolumeClaim" and "ReadWriteMany" in pvc["spec"]["accessModes"]
    claim = pvc["metadata"]["name"]
    images = set()
    for group, pod, _ in _pod_specs(job["spec"]["rayClusterSpec"]):
        spec = pod["template"]["spec"]
        volumes = {
            v["name"]
            for v in spec["volumes"]
            if v.get("persistentVolumeClaim", {}).get("claimName") == claim
        }
        assert len(volumes) == 1, f"{group} does not mount the results volume"
        for container in spec["containers"]:
            images.add(container["image"])
            mounts = [m["mountPath"] for m in container["volumeMounts"] if m["name"] in volumes]
            assert mounts == [str(storage)], f"{group} mounts the results at {mounts}"
    assert len(images) == 1, f"every pod must run the same image, got {images}"
    assert job["spec"]["rayClusterSpec"]["rayVersion"] == _installed_ray()


def _installed_ray() -> str:
    import ray

    return str(ray.__version__)


def _fake_workbench(tmp_path: Path, exit_code: int = 0) -> dict[str, str]:
    """A `workbench` on PATH that records its arguments and exits with ``exit_code``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "workbench"
    fake.write_text(
        f'#!/usr/bin/env bash\necho "$@" >> "{tmp_path}/calls"\n'
        f'echo "WAIT=$WORKBENCH_WAIT_FOR_RESOURCES_S" >> "{tmp_path}/calls"\nexit {exit_code}\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _run_entrypoint(env: dict[str, str], results: Path) -> subprocess.CompletedProcess[str]:
    script, experiment_file, _ = entrypoint()
    return subprocess.run(
        ["bash", str(script), str(experiment_file), str(results)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_first_attempt_starts_the_population(tmp_path: Path) -> None:
    env = _fake_workbench(tmp_path)
    results = tmp_path / "storage" / "pop-1"
    done = _run_entrypoint(env, results)
    assert done.returncode == 0, done.stderr
    _, experiment_file, _ = entrypoint()
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0] == (f"run {experiment_file} --set storage={results.parent} --name pop-1")
    assert calls[1] == "WAIT=600"  # the pre-flight waits for worker pods to join


def test_a_retry_resumes_the_run_that_the_folder_holds(tmp_path: Path) -> None:
    env = _fake_workbench(tmp_path, exit_code=130)
    results = tmp_path / "storage" / "pop-1"
    results.mkdir(parents=True)
    (results / "tuner.pkl").write_bytes(b"state")
    (results / "workbench_experiment.yaml").write_text("name: pop-1\n")
    done = _run_entrypoint(env, results)
    # The exit status is workbench's own (the RayJob retries on failure).
    assert done.returncode == 130
    assert (tmp_path / "calls").read_text().splitlines()[0] == f"resume {results}"


def test_a_folder_without_tune_state_is_moved_aside_and_the_run_starts(tmp_path: Path) -> None:
    env = _fake_workbench(tmp_path)
    results = tmp_path / "storage" / "pop-1"
    results.mkdir(parents=True)
    (results / "workbench_experiment.yaml").write_text("name: pop-1\n")
    done = _run_entrypoint(env, results)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "calls").read_text().splitlines()[0].startswith("run ")
    (aside,) = (tmp_path / "storage").glob("pop-1.incomplete-*")
    assert (aside / "workbench_experiment.yaml").is_file()
    assert not results.exists()


# --- the pods against the plan --------------------------------------------------------------

_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m?)$")


def _cpus(quantity: Any) -> float:
    match = _QUANTITY.match(str(quantity))
    assert match, f"unexpected CPU quantity {quantity!r}"
    return float(match.group(1)) / (1000 if match.group(2) else 1)


def ray_nodes(cluster_spec: dict[str, Any]) -> Cluster:
    """The Ray nodes KubeRay starts: rayStartParams num-cpus/num-gpus when given (else the
    container's limits, as KubeRay derives them), one node per replica."""
    nodes = []
    for group, pod, replicas in _pod_specs(cluster_spec):
        params = pod.get("rayStartParams", {})
        container = pod["template"]["spec"]["containers"][0]
        limits = container["resources"]["limits"]
        cpus = float(params["num-cpus"]) if "num-cpus" in params else _cpus(limits["cpu"])
        gpus = float(params.get("num-gpus", limits.get("nvidia.com/gpu", 0)))
        for index in range(replicas):
            nodes.append(Node(f"{group}-{index}", {"CPU": cpus, "GPU": gpus}))
    return Cluster(tuple(nodes), "the RayJob's pods")


def test_the_pods_are_what_the_plan_of_the_experiment_needs() -> None:
    job = load("rayjob.yaml")
    _, experiment_file, results = entrypoint()
    resolved = load_and_resolve(
        experiment_file,
        [f"storage={results.parent}", f"name={results.name}"],
        check_results=False,
    )
    cluster_spec = job["spec"]["rayClusterSpec"]
    cluster = ray_nodes(cluster_spec)
    plan = make_plan(resolved, cluster)
    assert plan.fits, plan.problems
    # Sized for the whole population at once, and nothing Ray could hand out left idle.
    assert plan.concurrent == plan.trials == resolved.experiment.population
    per_trial = plan.request.totals
    for resource in ("CPU", "GPU"):
        assert cluster.totals.get(resource, 0.0) == plan.trials * per_trial.get(resource, 0.0), (
            f"{resource}: the pods give Ray {fmt(cluster.totals)}, the population needs "
            f"{plan.trials} x {fmt(per_trial)}"
        )
    # No trial on the head: its Ray CPUs are 0, so the driver has it to itself.
    assert cluster_spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    learner_bundles = [b for b in plan.request.bundles if b.role.startswith("learner")]
    assert learner_bundles and all(b.resources.get("GPU") for b in learner_bundles)
    for group, pod, _ in _pod_specs(cluster_spec):
        params = pod.get("rayStartParams", {})
        resources = pod["template"]["spec"]["containers"][0]["resources"]
        requests, limits = resources["requests"], resources["limits"]
        gpus = float(params.get("num-gpus", 0))
        # Kubernetes must give the pod what Ray will hand out on it.
        assert float(limits.get("nvidia.com/gpu", 0)) == gpus, group
        assert float(requests.get("nvidia.com/gpu", 0)) == gpus, group
        ray_cpus = float(params["num-cpus"])
        assert _cpus(requests["cpu"]) >= ray_cpus and _cpus(limits["cpu"]) >= ray_cpus, group
        # A GPU learner is booked at 0 CPUs (cpus_per_learner auto): its process needs a
        # core the pod holds beyond Ray's count, one per GPU (at most one learner each).
        cpu_per_learner = min(b.resources.get("CPU", 0.0) for b in learner_bundles)
        if gpus and cpu_per_learner == 0:
            assert _cpus(requests["cpu"]) - ray_cpus >= gpus, group
