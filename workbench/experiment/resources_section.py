"""The experiment file's ``resources`` section: what one trial asks for, its env runners,
and the older flat spellings the loader still reads."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from workbench.experiment.schema_base import (
    MAX_CPUS,
    MAX_ENVS,
    MAX_GPUS,
    MAX_MEMORY_GB,
    MAX_RUNNERS,
    _Strict,
)

PlacementStrategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
VectorizeMode = Literal["auto", "sync", "async", "vector_entry_point"]
# Keys of the flat layout that preceded the env_runners block; still read, never written.
_LEGACY_RUNNER_KEYS = {"envs_per_runner": "envs_per_runner", "cpus_per_runner": "cpus_each"}


class EnvRunnersSection(_Strict):
    """The env runners of one trial: actors that step the environments (sampling)."""

    count: NonNegativeInt = Field(
        0,
        le=MAX_RUNNERS,
        description="Remote env runners (0: sample in the trial's main process).",
    )
    cpus_each: PositiveFloat = Field(
        1.0,
        le=MAX_CPUS,
        description="CPUs of each runner's bundle (fractions let runners share a core).",
    )
    envs_per_runner: PositiveInt = Field(
        8, le=MAX_ENVS, description="Environments each runner steps."
    )
    vectorize: VectorizeMode = Field(
        "auto",
        description="How a runner batches its environments (RLlib's gym_env_vectorize_mode): "
        "'vector_entry_point' steps them all in one call of the env's own vector class "
        "(sim_ext's C++ batch), 'sync' one after the other in Python, 'async' in "
        "subprocesses; 'auto' is vector_entry_point for sim_ext ids, else sync.",
    )


class ResourcesSection(_Strict):
    """What one trial asks for: its placement group (gang-scheduled: all bundles or none).

    The bundles are RLlib's own (`Algorithm.default_resource_request`): the main process,
    one per env runner, one per remote learner. `workbench plan` prints them and how many
    trials fit on a cluster; `workbench run` refuses a trial that could never fit.
    """

    model_config = ConfigDict(json_schema_extra=lambda schema, _: _legacy_resources_schema(schema))

    cpus_main: PositiveFloat = Field(
        1.0,
        le=MAX_CPUS,
        description="CPUs of the trial's main process (with num_learners 0 it also hosts "
        "the learner; fractions let several small trials share a core).",
    )
    num_learners: NonNegativeInt = Field(
        0,
        le=MAX_RUNNERS,
        description="Remote learner actors (0: learn in the trial's main process).",
    )
    gpus_per_learner: NonNegativeFloat = Field(
        0.0,
        le=MAX_GPUS,
        description="GPUs of each learner (with num_learners 0: of the main process). "
        "A fraction lets trials share a GPU (one learner per trial); above 1, whole GPUs.",
    )
    cpus_per_learner: Annotated[float, Field(ge=0, le=MAX_CPUS)] | Literal["auto"] = Field(
        "auto",
        description="CPUs of each learner; 'auto' is RLlib's rule: 1 without a GPU, 0 with one.",
    )
    env_runners: EnvRunnersSection = Field(
        default_factory=EnvRunnersSection,
        description="The env runners: {count, cpus_each, envs_per_runner, vectorize}; a "
        "number is the count.",
    )
    placement_strategy: PlacementStrategy = Field(
        "PACK",
        description="How a trial's bundles are placed on nodes (Ray placement group "
        "strategy): PACK as few nodes as possible, SPREAD over as many as possible, "
        "STRICT_PACK all on one node, STRICT_SPREAD each on a different node.",
    )
    memory_per_process_gb: PositiveFloat = Field(
        0.5,
        le=MAX_MEMORY_GB,
        description="Memory each of a trial's processes holds (its main process, each env "
        "runner, each learner), for the plan's memory check: Ray places trials by CPU and "
        "GPU only, so `workbench plan` and `run` refuse a population whose processes the "
        "nodes' memory cannot hold at once. About 0.5 GB with torch and RLlib loaded "
        "(docs/resources.md); raise it for a simulator or model that holds more.",
    )
    no_gpu: Literal["fail", "cpu_fallback"] = Field(
        "fail",
        description="When the cluster has no GPU at all but the trial asks for one: 'fail' "
        "(refuse to start, with the numbers) or 'cpu_fallback' (learners train on CPU, "
        "said loudly at start).",
    )

    @model_validator(mode="before")
    @classmethod
    def _read_legacy_keys(cls, data: Any) -> Any:
        """`env_runners: 2` is the count; flat `envs_per_runner` / `cpus_per_runner` (the
        layout before the env_runners block, in older files and saved results) move in."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        runners = data.get("env_runners")
        if isinstance(runners, int) and not isinstance(runners, bool):
            runners = {"count": runners}
        legacy = {new: data.pop(old) for old, new in _LEGACY_RUNNER_KEYS.items() if old in data}
        if legacy:
            if runners is None:
                runners = {}
            if isinstance(runners, dict):
                for key, value in legacy.items():
                    if key in runners and runners[key] != value:
                        raise ValueError(
                            f"env_runners.{key} is {runners[key]!r} but the older flat key "
                            f"says {value!r}; keep env_runners.{key} only"
                        )
                runners = {**legacy, **runners}
        if runners is not None:
            data["env_runners"] = runners
        return data

    @model_validator(mode="after")
    def _learners_make_sense(self) -> ResourcesSection:
        gpus = self.gpus_per_learner
        if gpus > 1 and not float(gpus).is_integer():
            raise ValueError(
                f"gpus_per_learner {gpus:g}: above 1 GPU a learner takes whole GPUs "
                f"(Ray cannot split a request across GPUs); use {int(gpus)} or {int(gpus) + 1}"
            )
        if self.num_learners > 1 and 0 < gpus < 1:
            raise ValueError(
                f"num_learners {self.num_learners} at gpus_per_learner {gpus:g}: learners "
                "of one trial sharing a GPU fail in NCCL (Ray PR 45382); use one learner "
                "with a fractional GPU, or whole GPUs per learner"
            )
        if self.num_learners > 0 and gpus == 0 and self.cpus_per_learner == 0:
            raise ValueError(
                "cpus_per_learner 0 with gpus_per_learner 0: a learner needs a CPU or a "
                "GPU; give cpus_per_learner > 0 (or 'auto')"
            )
        return self


def _legacy_resources_schema(schema: dict[str, Any]) -> None:
    """Editors must accept what the loader accepts: the count as `env_runners: N` and the
    flat keys of older files (marked deprecated)."""
    props = schema["properties"]
    block = {k: v for k, v in props["env_runners"].items() if k not in ("description", "title")}
    props["env_runners"] = {
        "anyOf": [block, {"type": "integer", "minimum": 0}],
        "title": "Env Runners",
        "description": props["env_runners"].get("description", ""),
    }
    props["envs_per_runner"] = {
        "type": "integer",
        "exclusiveMinimum": 0,
        "deprecated": True,
        "description": "Older spelling of env_runners.envs_per_runner.",
    }
    props["cpus_per_runner"] = {
        "type": "number",
        "exclusiveMinimum": 0,
        "deprecated": True,
        "description": "Older spelling of env_runners.cpus_each.",
    }
