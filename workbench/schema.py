"""The experiment file: a typed schema, loading, overrides and validation.

Every problem is reported with the file, the field, the value and what would be
valid (``ExperimentError``), before anything starts: no Ray, no results folder.
``workbench schema`` exports :class:`Experiment`'s JSON Schema for editors.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
)

from workbench.algorithms import ALGORITHMS
from workbench.errors import ExperimentError, Problem, did_you_mean, one_of
from workbench.search_space import ParamSpec

# Metrics RLlib's new API stack reports in every training result, whatever the algorithm.
RETURN_METRIC = "env_runners/episode_return_mean"
REPORTED_METRICS = frozenset(
    {
        "training_iteration",
        "time_total_s",
        "time_this_iter_s",
        "num_env_steps_sampled_lifetime",
        RETURN_METRIC,
        "env_runners/episode_len_mean",
        "env_runners/episode_return_max",
        "env_runners/episode_return_min",
        "env_runners/num_episodes",
        "env_runners/num_env_steps_sampled",
    }
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class EnvSection(_Strict):
    """The environment every trial trains on."""

    id: str = Field(description="A sim_ext id (sim_ext/CartPole-v1) or a registered Gymnasium id.")
    config: dict[str, Any] = Field(
        default_factory=dict, description="env_config: keyword arguments of the environment."
    )


class SearchSpaceSection(_Strict):
    """Hyperparameters to search: a file from search_spaces/ and/or inline blocks."""

    file: str | None = Field(
        None,
        description="A YAML file of blocks (name: {loguniform: [low, high]}), looked up next to "
        "the experiment, then in search_spaces/. Inline params override its entries.",
    )
    params: dict[str, ParamSpec] = Field(
        default_factory=dict, description="Inline blocks, one per hyperparameter."
    )


class PBTScheduler(_Strict):
    """Population-based training: exploit the top, explore by perturbing (clamped to bounds)."""

    type: Literal["pbt"]
    perturbation_interval: PositiveInt = Field(
        4, description="Training iterations between exploit/explore decisions."
    )
    burn_in_period: NonNegativeInt = Field(0, description="Iterations before the first one.")
    quantile_fraction: float = Field(
        0.25, gt=0, le=0.5, description="Fraction of the population cloned / replaced."
    )
    resample_probability: float = Field(
        0.25, ge=0, le=1, description="Chance of resampling a value instead of perturbing it."
    )
    perturbation_factors: tuple[PositiveFloat, PositiveFloat] = Field(
        (1.2, 0.8), description="Factors a continuous value is multiplied by."
    )
    synch: bool = Field(False, description="Synchronous PBT (wait for the whole population).")


class PB2Scheduler(_Strict):
    """PB2: PBT whose explore step is a GP bandit over the numeric bounds."""

    type: Literal["pb2"]
    perturbation_interval: PositiveInt = 4
    quantile_fraction: float = Field(0.25, gt=0, le=0.5)


class ASHAScheduler(_Strict):
    """Asynchronous successive halving: stop weak trials early."""

    type: Literal["asha"]
    max_t: PositiveInt = Field(100, description="Most iterations a trial may train.")
    grace_period: PositiveInt = Field(5, description="Iterations before a trial can be stopped.")
    reduction_factor: float = Field(3.0, gt=1)
    brackets: PositiveInt = 1


class FIFOScheduler(_Strict):
    """Every trial runs to its stop rule."""

    type: Literal["fifo"]


Scheduler = Annotated[
    PBTScheduler | PB2Scheduler | ASHAScheduler | FIFOScheduler, Field(discriminator="type")
]


class SearchSection(_Strict):
    """How the initial configurations are drawn."""

    type: Literal["random", "grid", "optuna"] = Field(
        "random",
        description="random: sample each block; grid: only grid blocks (all "
        "combinations); optuna: Optuna's TPE (not with PBT/PB2, which mutate configs).",
    )
    seed: int | None = Field(None, description="Seed of the searcher (defaults to `seed`).")


class StopSection(_Strict):
    """A trial stops at the first rule met."""

    return_mean: float | None = Field(
        None, description=f"Stop once {RETURN_METRIC} reaches this value."
    )
    iterations: PositiveInt | None = Field(None, description="training_iteration")
    env_steps: PositiveInt | None = Field(None, description="num_env_steps_sampled_lifetime")
    wall_time_s: PositiveFloat | None = Field(
        None,
        description="Wall-clock budget of the whole experiment, startup, restores and "
        "checkpoints included (Tune's time_budget_s): every trial stops when it runs out.",
    )
    trial_time_s: PositiveFloat | None = Field(
        None, description="A trial's own training time (time_total_s, which excludes restores)."
    )
    metrics: dict[str, float] = Field(
        default_factory=dict, description="Other reported metrics: stop once one reaches its value."
    )
    all_at_return: bool | None = Field(
        None,
        description="End the whole experiment once any trial reaches return_mean "
        "(default: yes under PBT/PB2, whose population searches together; no otherwise).",
    )

    @field_validator("metrics")
    @classmethod
    def _reported(cls, value: dict[str, float]) -> dict[str, float]:
        for name in value:
            if name not in REPORTED_METRICS:
                raise ValueError(
                    f"{name!r} is never reported{did_you_mean(name, REPORTED_METRICS)}; "
                    f"reported metrics: {one_of(REPORTED_METRICS)}"
                )
        return value

    def tune_stop(self) -> dict[str, float]:
        rules: dict[str, float] = dict(self.metrics)
        if self.return_mean is not None:
            rules[RETURN_METRIC] = self.return_mean
        if self.iterations is not None:
            rules["training_iteration"] = self.iterations
        if self.env_steps is not None:
            rules["num_env_steps_sampled_lifetime"] = self.env_steps
        if self.trial_time_s is not None:
            rules["time_total_s"] = self.trial_time_s
        return rules


class CheckpointSection(_Strict):
    frequency: PositiveInt = Field(4, description="Checkpoint every this many iterations.")
    keep: PositiveInt = Field(
        4, description="Checkpoints kept per trial (PBT/PB2 need >= 3: a donor's must survive)."
    )
    at_end: bool = Field(True, description="Checkpoint when a trial finishes.")


class FailureSection(_Strict):
    max_failures: NonNegativeInt = Field(
        2, description="Times a trial is retried from its last checkpoint before it fails."
    )


class ResourcesSection(_Strict):
    """Per trial (the resource topology issue extends this)."""

    cpus_main: PositiveFloat = Field(
        1.0,
        description="CPUs of the trial's main process (with num_learners 0 it also hosts "
        "the learner; fractions let several small trials share a core).",
    )
    env_runners: NonNegativeInt = Field(
        0, description="Remote env runners (0: sample in the trial's main process)."
    )
    envs_per_runner: PositiveInt = Field(8, description="Vectorized envs per runner.")
    cpus_per_runner: PositiveFloat = 1.0
    num_learners: NonNegativeInt = Field(0, description="Remote learners (0: local learner).")
    gpus_per_learner: NonNegativeFloat = 0.0
    cpus_per_learner: PositiveFloat = 1.0


class TrackingSection(_Strict):
    """Where and what the workbench logs to MLflow (see workbench/tracking.py)."""

    enabled: bool = Field(True, description="Log the population to MLflow.")
    uri: str | None = Field(
        None,
        description="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else an sqlite store "
        "<storage>/mlflow.db next to the results).",
    )
    experiment: str | None = Field(None, description="MLflow experiment name (default: name).")
    metrics: Literal["curated", "all"] | list[str] = Field(
        "curated",
        description="Result metrics logged per result: 'curated' (return, episode length, env "
        "steps, throughput, timers, losses), 'all', or a list of glob patterns over the "
        "flattened result keys (e.g. 'learners/*/vf_loss').",
    )
    flush_timeout_s: PositiveFloat = Field(
        120.0,
        description="At the end of a run, how long to wait for an unreachable store before "
        "spooling the unwritten results to the results folder (written at the next resume).",
    )


class Experiment(_Strict):
    """A population search: what trains, on what, searched how, stopped when, stored where."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Names the results.")
    algorithm: str = Field(description=f"One of {', '.join(ALGORITHMS)}.")
    env: EnvSection
    training: dict[str, Any] = Field(
        default_factory=dict,
        description="Fixed hyperparameters, RLlib's public names (lr, lambda_, "
        "train_batch_size_per_learner, ...).",
    )
    search_space: SearchSpaceSection = Field(default_factory=SearchSpaceSection)
    scheduler: Scheduler = Field(default_factory=lambda: FIFOScheduler(type="fifo"))
    search: SearchSection = Field(default_factory=SearchSection)
    population: PositiveInt = Field(
        4, alias="num_samples", description="Trials (num_samples; per grid point with grids)."
    )
    max_concurrent: PositiveInt | None = Field(
        None, description="Trials running at once (default: as many as fit)."
    )
    stop: StopSection = Field(default_factory=StopSection)
    checkpoint: CheckpointSection = Field(default_factory=CheckpointSection)
    failure: FailureSection = Field(default_factory=FailureSection)
    resources: ResourcesSection = Field(default_factory=ResourcesSection)
    tracking: TrackingSection = Field(default_factory=TrackingSection)
    storage: str = Field("results", description="Results folder; this run goes to storage/name.")
    seed: int = Field(0, description="Seeds searchers, PBT's choices and every trial's streams.")

    @field_validator("algorithm")
    @classmethod
    def _known_algorithm(cls, value: str) -> str:
        if value not in ALGORITHMS:
            upper = {a.upper(): a for a in ALGORITHMS}
            if value.upper() in upper:
                return upper[value.upper()]
            raise ValueError(
                f"unknown algorithm {value!r}{did_you_mean(value, ALGORITHMS)}; "
                f"valid: {one_of(ALGORITHMS)}"
            )
        return value


def json_schema() -> dict[str, Any]:
    """The JSON Schema of experiment files (for editors: yaml-language-server)."""
    schema = Experiment.model_json_schema(by_alias=False)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "PBT workbench experiment"
    population = schema["properties"]["population"]
    schema["properties"]["num_samples"] = {
        **population,
        "title": "Num Samples",
        "description": "Alias of population.",
    }
    schema["not"] = {"required": ["population", "num_samples"]}
    return schema


# --- loading -------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads 1e-3 (no dot) as a float, as YAML 1.2 and people do."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_yaml(path: Path) -> Any:
    """safe_load with errors that give the file, line and column."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ExperimentError.single(str(path), "", "no such file") from None
    except OSError as err:
        raise ExperimentError.single(str(path), "", f"cannot be read: {err.strerror}") from None
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise ExperimentError.single(
            str(path), "", f"invalid YAML at {where}: {err.problem}"
        ) from None
    except yaml.YAMLError as err:
        raise ExperimentError.single(str(path), "", f"invalid YAML: {err}") from None


def apply_overrides(raw: dict[str, Any], overrides: list[str], file: str) -> dict[str, Any]:
    """``--set key.path=value`` (the value read as YAML: 3, 1e-3, true, [1, 2], text)."""
    data = copy.deepcopy(raw)
    for item in overrides:
        if "=" not in item:
            raise ExperimentError.single(
                file, "--set", f"{item!r} is not key.path=value (for example stop.iterations=20)"
            )
        path, _, text = item.partition("=")
        keys = path.strip().split(".")
        if not all(keys):
            raise ExperimentError.single(file, "--set", f"{path!r} is not a dotted key path")
        try:
            value = yaml.load(text, Loader=_Loader)
        except yaml.YAMLError:
            value = text
        node = data
        for key in keys[:-1]:
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                raise ExperimentError.single(
                    file, path, f"--set cannot go inside {key!r}, which is {child!r}"
                )
            node = child
        node[keys[-1]] = value
    return data


def _problems_from(err: ValidationError, file: str, model: type[BaseModel]) -> list[Problem]:
    problems = []
    for e in err.errors():
        loc = [str(part) for part in e["loc"]]
        # Drop pydantic's union tags (scheduler.pbt.x -> scheduler.x).
        section: type[BaseModel] = model
        if len(loc) >= 2 and loc[0] == "scheduler" and loc[1] in _SCHEDULERS:
            section = _SCHEDULERS[loc.pop(1)]
        field = ".".join(loc)
        value = e.get("input")
        if e["type"] == "extra_forbidden":
            valid = (
                _fields_at(model, loc[:-1]) if section is model else _fields_at(section, loc[1:-1])
            )
            message = f"unknown key {loc[-1]!r}{did_you_mean(loc[-1], valid)}; valid: " + (
                one_of(valid) if valid else "none"
            )
        elif e["type"] == "missing":
            message = "is required"
        elif e["type"] == "union_tag_invalid":
            message = f"unknown type {value.get('type')!r}; valid: 'asha', 'fifo', 'pb2', 'pbt'"
            field = field.rsplit(".", 1)[0] + ".type" if field else "type"
        elif e["type"] == "union_tag_not_found":
            message = "needs a type: one of 'asha', 'fifo', 'pb2', 'pbt'"
        else:
            text = e["msg"].removeprefix("Value error, ")
            shown = "" if isinstance(value, dict) else f"{value!r}: "
            message = f"{shown}{text}"
        problems.append(Problem(file, field, message))
    return problems


_SCHEDULERS: dict[str, type[BaseModel]] = {
    "pbt": PBTScheduler,
    "pb2": PB2Scheduler,
    "asha": ASHAScheduler,
    "fifo": FIFOScheduler,
}


def _fields_at(model: type[BaseModel], loc: list[str]) -> list[str]:
    """The valid keys of the section at ``loc`` (for did-you-mean on unknown keys)."""
    current: Any = model
    parts = iter(loc)
    for part in parts:
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        annotation = fields[part].annotation
        current = _model_in(annotation)
        if current is None:
            return []
        if getattr(annotation, "__origin__", None) is dict:
            next(parts, None)  # a key of the mapping (a parameter name), not a field
    fields = getattr(current, "model_fields", {})
    names = set(fields) | {f.alias for f in fields.values() if f.alias}
    return sorted(names)


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    """Reads, overrides and validates one experiment file (the schema only; see resolve)."""
    file = Path(path)
    raw = read_yaml(file)
    if not isinstance(raw, dict):
        raise ExperimentError.single(
            str(file), "", f"must be a mapping of sections, got {type(raw).__name__}"
        )
    raw = apply_overrides(raw, overrides or [], str(file))
    try:
        return Experiment.model_validate(raw)
    except ValidationError as err:
        raise ExperimentError(_problems_from(err, str(file), Experiment)) from None
