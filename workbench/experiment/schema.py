"""The experiment file: a typed schema (the resources section in resources_section.py;
loading and its errors in loading.py).

Every problem is reported with the file, the field, the value and what would be
valid (``ExperimentError``), before anything starts: no Ray, no results folder.
``workbench schema`` exports :class:`Experiment`'s JSON Schema for editors
(`workbench.experiment.loading.json_schema`).
"""

from __future__ import annotations

import itertools
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from workbench.errors import did_you_mean, one_of
from workbench.experiment.algorithms import ALGORITHMS
from workbench.experiment.resources_section import ResourcesSection
from workbench.experiment.schema_base import MAX_TRIALS_EVER, _Strict
from workbench.experiment.search_space import ParamSpec
from workbench.names import (
    EVAL_RETURN_METRIC,
    RETURN_METRIC,
    SCORE_EPISODES_METRIC,
    SCORE_METRIC,
    SCORE_STD_METRIC,
)

REPORTED_METRICS = frozenset(
    {
        "training_iteration",
        SCORE_METRIC,
        SCORE_STD_METRIC,
        SCORE_EPISODES_METRIC,
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


# Counts beyond what a Ray cluster could hold or a person could mean: a bigger number is a
# typo (population 10**12 started trial folders until it was killed).
class EnvSection(_Strict):
    """The environment every trial trains on."""

    id: str = Field(
        description="A sim_ext id (sim_ext/CartPole-v1), an EnvPool task (envpool/"
        "LunarLanderContinuous-v3, with the envpool extra) or a registered Gymnasium id."
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="env_config: keyword arguments of the environment."
    )
    normalize_observations: bool = Field(
        False,
        description="Normalise observations with a running mean and standard deviation "
        "(RLlib's MeanStdFilter, clipped to +-10) learnt while the trial samples; the "
        "statistics go with the policy into its checkpoints, evaluations and exports. Helps "
        "where observation scales differ widely (MountainCar). The fast env runner "
        "applies the filter to each vector step, with RLlib's statistics.",
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


class _ExploitRules(_Strict):
    """What PBT and PB2 rank members on, and when a member may be cloned over."""

    rank_on: Literal["evaluation", "score"] = Field(
        "evaluation",
        description="'evaluation': rank members on their latest short deterministic "
        "evaluation (evaluation.every, evaluation.short_episodes): the policy a clone "
        "would copy, judged as the user will judge it; decisions wait for one. 'score': "
        "on the training window (score.window), which straddles restarts and samples "
        "actions (docs/benchmarks/scheduler-shootout.md).",
    )
    exploit_test: Literal["welch", "none"] = Field(
        "welch",
        description="'welch': a member is cloned over only when the donor is better by "
        "Welch's t-test on their evaluations (or score windows) at exploit_alpha, as in "
        "the PBT paper's t-test selection: two members that are equally good both "
        "survive; 'none': whenever the donor ranks higher (Tune's truncation selection).",
    )
    exploit_alpha: float = Field(
        0.05, gt=0, lt=1, description="The test's significance level (one-sided)."
    )
    exploit_min_gain: float = Field(
        0.0,
        ge=0,
        le=1e12,
        description="The smallest gain in return worth a clone, in the task's reward units: "
        "the donor's mean must beat the target's by more than this (with exploit_test: "
        "welch, significantly so). 0: any gain. Where small differences are not progress "
        "(MountainCarContinuous: action costs of a few points separate members before any "
        "has reached the flag's +100), a clone over them spreads one habit and ends the "
        "others' exploration (docs/scores.md).",
    )
    spare_improving: bool = Field(
        False,
        description="A member whose own ranked figure is clearly above the one it had at "
        "its last decision (by more than exploit_min_gain; with exploit_test: welch, "
        "significantly) is not cloned over: it is still learning, and a lead over it "
        "is no evidence that it would end behind (docs/scores.md).",
    )


class PbtSection(_ExploitRules):
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


class Pb2Section(_ExploitRules):
    """PB2: PBT whose explore step is a GP bandit over the numeric bounds."""

    type: Literal["pb2"]
    perturbation_interval: PositiveInt = 4
    burn_in_period: NonNegativeInt = Field(
        0,
        description="Iterations before the first decision (PB2 gathers its data meanwhile).",
    )
    quantile_fraction: float = Field(0.25, gt=0, le=0.5)
    synch: bool = Field(False, description="Synchronous PB2 (wait for the whole population).")


class AshaSection(_Strict):
    """Asynchronous successive halving: stop weak trials early."""

    type: Literal["asha"]
    max_t: PositiveInt = Field(100, description="Most iterations a trial may train.")
    grace_period: PositiveInt = Field(5, description="Iterations before a trial can be stopped.")
    reduction_factor: float = Field(3.0, gt=1)
    brackets: PositiveInt = 1


class FifoSection(_Strict):
    """Every trial runs to its stop rule."""

    type: Literal["fifo"]


class ReplayStep(_Strict):
    """From this iteration on, train with these values (the others stay as they were)."""

    iteration: PositiveInt = Field(description="The first Tune iteration trained with them.")
    values: dict[str, Any] = Field(
        min_length=1, description="Hyperparameters by RLlib's public names (lr, lambda_, ...)."
    )


class ReplaySection(_Strict):
    """Replays a hyperparameter schedule: every trial starts with the first step's values
    and changes to a step's values before training its iteration (it saves a checkpoint
    and restores it with the new config, as a PBT exploit does, onto its own weights).
    `workbench export-schedule` writes one from a PBT population's winner."""

    type: Literal["replay"]
    schedule: list[ReplayStep] = Field(
        min_length=1,
        description="Steps by increasing iteration; the first is iteration 1 and names "
        "every hyperparameter the schedule sets.",
    )

    @field_validator("schedule")
    @classmethod
    def _ordered_and_complete(cls, steps: list[ReplayStep]) -> list[ReplayStep]:
        if steps[0].iteration != 1:
            raise ValueError(
                f"the first step is at iteration {steps[0].iteration}; it must be at "
                "iteration 1 (the values training starts with)"
            )
        names = set(steps[0].values)
        for before, step in itertools.pairwise(steps):
            if step.iteration <= before.iteration:
                raise ValueError(
                    f"iteration {step.iteration} follows iteration {before.iteration}; "
                    "give the steps by strictly increasing iteration"
                )
            extra = sorted(set(step.values) - names)
            if extra:
                raise ValueError(
                    f"the step at iteration {step.iteration} sets {', '.join(extra)}, which "
                    f"the first step does not; the first step must name every "
                    f"hyperparameter (it has {', '.join(sorted(names))})"
                )
        return steps

    def values_at(self, iteration: int) -> dict[str, Any]:
        """The values iteration `iteration` trains with."""
        values: dict[str, Any] = {}
        for step in self.schedule:
            if step.iteration > iteration:
                break
            values.update(step.values)
        return values


SchedulerSection = Annotated[
    PbtSection | Pb2Section | AshaSection | FifoSection | ReplaySection,
    Field(discriminator="type"),
]


class SearchSection(_Strict):
    """How the initial configurations are drawn."""

    type: Literal["random", "grid", "optuna"] = Field(
        "random",
        description="random: sample each block; grid: only grid blocks (all "
        "combinations); optuna: Optuna's TPE (not with PBT/PB2, which mutate configs).",
    )
    seed: int | None = Field(
        None, ge=0, le=2**32 - 1, description="Seed of the searcher (defaults to `seed`)."
    )
    startup_trials: PositiveInt = Field(
        3,
        le=10_000,
        description="optuna: random trials before TPE models the study (Optuna's own "
        "default, 10, is more trials than a small population runs: all of them random).",
    )


class StopSection(_Strict):
    """A trial stops at the first rule met."""

    return_mean: float | None = Field(
        None,
        description=f"Stop once the score ({SCORE_METRIC}: the mean return of the last "
        "score.window episodes) reaches this value and an evaluation of the trial's policy "
        "over eval_episodes episodes confirms it.",
    )
    eval_episodes: NonNegativeInt = Field(
        100,
        le=100_000,
        description="Episodes of the evaluation that confirms a stop on return_mean (seeds "
        "seed, seed+1, ...; evaluation.deterministic says how the policy acts); a trial "
        "that falls short trains on. 0: stop on the score alone.",
    )
    eval_from: float | None = Field(
        None,
        description="The score at which a trial's policy is first evaluated (default: "
        "return_mean). Lower it where the training episodes understate the policy the "
        "evaluation judges (a deterministic evaluation of a stochastic policy): the stop is "
        "still judged by the evaluation against return_mean.",
    )
    iterations: PositiveInt | None = Field(None, description="training_iteration")
    env_steps: PositiveInt | None = Field(None, description="num_env_steps_sampled_lifetime")
    wall_time_s: PositiveFloat | None = Field(
        None,
        description="Wall-clock budget of the whole experiment, restores and checkpoints "
        "included, counted across a resume's sessions: every trial stops when it runs out; "
        "`workbench resume NAME --set stop.wall_time_s=N` with a larger N goes on.",
    )
    trial_time_s: PositiveFloat | None = Field(
        None, description="A trial's own training time (time_total_s, which excludes restores)."
    )
    population_env_steps: PositiveInt | None = Field(
        None,
        description="Env-step budget of the whole experiment: it ends once its trials "
        "together have sampled this many env steps (each iteration's own, so an exploit or a "
        "restore does not move the count). Searches compared at equal compute get the same.",
    )
    metrics: dict[str, float] = Field(
        default_factory=dict, description="Other reported metrics: stop once one reaches its value."
    )
    all_at_return: bool | None = Field(
        None,
        description="End the whole experiment once any trial reaches return_mean "
        "(default: yes under PBT/PB2, whose population searches together; no otherwise).",
    )

    @model_validator(mode="after")
    def _eval_from(self) -> StopSection:
        if self.eval_from is None:
            return self
        if self.return_mean is None or not self.eval_episodes:
            raise ValueError(
                f"eval_from {self.eval_from:g} needs a return target confirmed by an "
                "evaluation: set return_mean and eval_episodes > 0, or remove eval_from"
            )
        if self.eval_from > self.return_mean:
            raise ValueError(
                f"eval_from {self.eval_from:g} is above return_mean {self.return_mean:g}: "
                "a trial is evaluated before its evaluation can stop it (a value <= "
                f"{self.return_mean:g})"
            )
        return self

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
            # Met by the trial's confirming evaluation, or by its score when there is none.
            key = EVAL_RETURN_METRIC if self.eval_episodes else SCORE_METRIC
            rules[key] = self.return_mean
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
        4,
        description="Checkpoints kept per trial: the newest this many, and besides them "
        "those a clone or a trial is about to restore and those a resume would start from, "
        "so a trial can hold a few more for a while (docs/resume.md). PBT/PB2 need >= 3: "
        "a donor's must survive.",
    )
    at_end: bool = Field(True, description="Checkpoint when a trial finishes.")


class ReportingSection(_Strict):
    """What one train() call (one Tune iteration) holds, and the window of the episode
    means: RLlib's ``AlgorithmConfig.reporting`` settings, under RLlib's names. Unset
    fields keep the algorithm's own values (APPO and IMPALA loop their training step for
    at least 10 s per iteration; PPO, DQN and SAC iterate on one batch)."""

    min_time_s_per_iteration: NonNegativeFloat | None = Field(
        None, description="An iteration lasts at least this many seconds (IMPALA/APPO: 10)."
    )
    min_sample_timesteps_per_iteration: NonNegativeInt | None = Field(
        None, description="An iteration samples at least this many env steps."
    )
    min_train_timesteps_per_iteration: NonNegativeInt | None = Field(
        None, description="An iteration trains on at least this many env steps."
    )
    metrics_num_episodes_for_smoothing: PositiveInt | None = Field(
        None,
        description=f"RLlib's smoothing window of {RETURN_METRIC} (RLlib: 100; in RLlib "
        "2.60 that figure holds the episodes of one iteration whatever it says). Stop rules "
        "and schedulers read the score instead: see score.window.",
    )


class ScoreSection(_Strict):
    """The score that schedulers rank, stop rules test and tables show (docs/scores.md)."""

    window: PositiveInt = Field(
        20,
        le=100_000,
        description=f"{SCORE_METRIC} is the mean return of the last this many episodes that "
        "ended, carried across iterations (and checkpoints, and PBT exploits): larger is "
        "less noisy, smaller follows the policy sooner.",
    )


class FailureSection(_Strict):
    max_failures: NonNegativeInt = Field(
        2, description="Times a trial is retried from its last checkpoint before it fails."
    )


# The tracking URI schemes MLflow opens a store for (a database URI may name its driver:
# postgresql+psycopg://...).
MLFLOW_SCHEMES = (
    "file",
    "sqlite",
    "postgresql",
    "mysql",
    "mssql",
    "http",
    "https",
    "databricks",
    "databricks-uc",
    "uc",
)


class TrackingSection(_Strict):
    """Where and what the workbench logs to MLflow (see docs/tracking.md)."""

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

    @field_validator("uri")
    @classmethod
    def _a_store_mlflow_opens(cls, value: str | None) -> str | None:
        if value is None or ("://" not in value and not value.startswith("file:")):
            return value  # unset, or a path: MLflow's file store
        scheme = value.split(":", 1)[0].split("+", 1)[0].lower()
        if scheme not in MLFLOW_SCHEMES:
            raise ValueError(
                f"MLflow has no tracking store for {scheme!r} URIs; valid schemes: "
                f"{one_of(MLFLOW_SCHEMES)} (e.g. sqlite:///abs/path/mlflow.db, http://host:5000)"
            )
        return value


class EvaluationSection(_Strict):
    """How trained policies are evaluated: `workbench eval`, and the best trial of the
    population at the end of `workbench run` / `workbench resume`."""

    at_end: Literal["best", "none"] = Field(
        "best",
        description="'best': when the population ends, choose the population's result: "
        "confirm its best candidates over `episodes` episodes, log eval/* to the chosen "
        "one's MLflow run and its policy as an MLflow model; 'none': skip it.",
    )
    episodes: PositiveInt = Field(
        100,
        le=100_000,
        description="Episodes to roll out (seeds seed, seed+1, ...); 100 CartPole episodes "
        "take well under a second on the C++ vector env (docs/scores.md).",
    )
    every: NonNegativeInt = Field(
        2,
        le=10_000,
        description="Iterations between a member's short evaluations of its current "
        "policy (candidates for the population's result, kept past checkpoint.keep; "
        "with scheduler.rank_on: evaluation, also what PBT and PB2 rank on). 0: none; the "
        "result is then chosen among the members' final checkpoints.",
    )
    short_episodes: PositiveInt = Field(
        10,
        le=10_000,
        description="Episodes of a short evaluation (seeds seed+50000, ...: never the "
        "confirming evaluation's).",
    )
    keep: PositiveInt = Field(
        2, le=1000, description="Candidates each member keeps: its best short evaluations."
    )
    confirm: PositiveInt = Field(
        3,
        le=1000,
        description="Candidates with the best short evaluations that the end of the run "
        "evaluates over `episodes` episodes; the best of them is the population's result.",
    )
    deterministic: bool = Field(
        True,
        description="Act with the policy's most likely action (argmax, or the mean of a "
        "continuous distribution) instead of sampling it.",
    )


class Experiment(_Strict):
    """A population search: what trains, on what, searched how, stopped when, stored where."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        max_length=100,
        description="Names the results (letters, digits, _ . -; at most 100 characters).",
    )
    algorithm: str = Field(description=f"One of {', '.join(ALGORITHMS)}.")
    env: EnvSection
    training: dict[str, Any] = Field(
        default_factory=dict,
        description="Fixed hyperparameters, RLlib's public names (lr, lambda_, "
        "train_batch_size_per_learner, ...).",
    )
    reporting: ReportingSection = Field(default_factory=ReportingSection)
    score: ScoreSection = Field(default_factory=ScoreSection)
    search_space: SearchSpaceSection = Field(default_factory=SearchSpaceSection)
    scheduler: SchedulerSection = Field(default_factory=lambda: FifoSection(type="fifo"))
    search: SearchSection = Field(default_factory=SearchSection)
    population: PositiveInt = Field(
        4,
        alias="num_samples",
        le=MAX_TRIALS_EVER,
        description="Trials (num_samples; per grid point with grids).",
    )
    max_concurrent: PositiveInt | None = Field(
        None, le=MAX_TRIALS_EVER, description="Trials running at once (default: as many as fit)."
    )
    max_trials: PositiveInt = Field(
        10_000,
        le=MAX_TRIALS_EVER,
        description="The most trials (population x grid points) this file may start: a "
        "larger search is refused before anything starts; raise it to confirm one.",
    )
    stop: StopSection = Field(default_factory=StopSection)
    checkpoint: CheckpointSection = Field(default_factory=CheckpointSection)
    failure: FailureSection = Field(default_factory=FailureSection)
    resources: ResourcesSection = Field(default_factory=ResourcesSection)
    tracking: TrackingSection = Field(default_factory=TrackingSection)
    env_runner: Literal["auto", "fast", "rllib"] = Field(
        "auto",
        description="How trials sample: 'fast' is the workbench's batched env runner (PPO, "
        "APPO, IMPALA on vector envs; several times RLlib's throughput, the same episodes), "
        "'rllib' RLlib's SingleAgentEnvRunner, 'auto' the fast one where it applies.",
    )
    learner: Literal["auto", "lean", "rllib"] = Field(
        "auto",
        description="How trials update: 'lean' is the workbench's PPO or DQN learner for "
        "small networks on CPU (RLlib's algorithm, its checkpoints and metrics, without "
        "RLlib's per-minibatch overhead; PPO's is needed for a clip_param schedule), "
        "'rllib' RLlib's own learner, 'auto' the lean one for PPO and DQN with a local CPU "
        "learner.",
    )
    model: dict[str, Any] = Field(
        default_factory=dict,
        description="The policy and value networks: fields of RLlib's DefaultModelConfig "
        "(fcnet_hiddens, fcnet_activation, vf_share_layers, ...). Fields left out come from "
        "`defaults`.",
    )
    defaults: Literal["auto", "small_env", "rllib"] = Field(
        "auto",
        description="What fills what the file leaves unset: 'small_env' the workbench's "
        "defaults for small vector observations (a 64x64 tanh MLP per network, four "
        "minibatches per PPO batch, one torch thread per trial process), 'rllib' RLlib's own "
        "(a 256x256 MLP, minibatches of 128), 'auto' small_env for PPO, APPO and IMPALA with "
        "discrete actions on a flat observation of at most 64 features, else rllib.",
    )
    reuse_actors: bool = Field(
        True,
        description="Tune keeps a trial's process for its next start (after a PBT pause or "
        "exploit) or for the next trial: the algorithm is rebuilt in it (tens of ms) instead "
        "of a new process importing torch and RLlib (about 4 s). false: a new process for "
        "every start.",
    )
    evaluation: EvaluationSection = Field(default_factory=EvaluationSection)
    storage: str = Field("results", description="Results folder; this run goes to storage/name.")
    seed: int = Field(
        0,
        ge=0,
        le=2**32 - 1,
        description="Seeds searchers, PBT's choices and every trial's streams.",
    )

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
