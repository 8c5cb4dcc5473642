"""The names several parts of the workbench share: one home for each spelling.

MLflow tag names, the files of a results folder, the result keys the workbench ranks
and steps by, and the rule that names a trial. A module that writes one of these and
another that reads it import it from here, so the two can never drift apart.
"""

from __future__ import annotations

from typing import Any

# --- result keys (RLlib 2.60's new API stack) ---------------------------------------------------
RETURN_METRIC = "env_runners/episode_return_mean"
STEPS_METRIC = "num_env_steps_sampled_lifetime"
# What one iteration sampled (RLlib 2.60); STEPS_METRIC is the trial's lineage's count,
# which an exploit or a restore moves.
ITERATION_ENV_STEPS_METRIC = "env_runners/num_env_steps_sampled"
# The score schedulers rank, stop rules test and tables show: the mean return of the last K
# completed episodes, carried across iterations (RETURN_METRIC is one iteration's few episodes).
SCORE_METRIC = "score/return_mean"
SCORE_STD_METRIC = "score/return_std"
SCORE_EPISODES_METRIC = "score/episodes"  # how many episodes the window holds (<= K)
# Logged with every result; its history in MLflow gives a run's last step.
STEP_METRIC = "training_iteration"
# In the first result after a trial restored an older checkpoint than Tune asked for: why.
CHECKPOINT_FALLBACK_KEY = "checkpoint_fallback"

# --- the files of a results folder --------------------------------------------------------------
STORE_FILE = "mlflow.db"  # the default sqlite MLflow store, beside the population folders
ARTIFACTS_DIR = "mlartifacts"  # the default store's artifacts, beside it
RESOLVED_FILE = "workbench_experiment.yaml"  # the experiment as resolved: resume reads it
LINEAGE_FILE = "lineage.jsonl"  # one line per PBT exploit
# Exploits a killed driver decided after its last snapshot: the resume's trials restart
# from that snapshot, so these are not in their history (workbench.tracking.callback).
LINEAGE_ROLLED_BACK_FILE = "lineage_rolled_back.jsonl"
SPOOL_FILE = "mlflow_pending.jsonl"  # MLflow writes the store did not take; resume writes them
BUDGET_FILE = "budget_ran_out.json"  # the trials a budget ended: `resume --set` extends it
SESSION_FILE = "ray_session.json"  # the local Ray the driver started (for cleanup)
PLOTS_DIR = "plots"  # the population's PNGs
LOG_FILE = "workbench.log"  # Ray's, Tune's and MLflow's logging in the driver (run.console)

# --- MLflow runs and tags -----------------------------------------------------------------------
PARENT = "__population__"  # the tracker's handle of the population's parent run
# MLflow's own tags, which the tracker sets and the inspection commands read.
PARENT_RUN_TAG = "mlflow.parentRunId"  # a trial run's population run
RUN_NAME_TAG = "mlflow.runName"  # the population's or the trial's name
KEY_TAG = "workbench.key"  # finds a population's runs again after a restore
ROLE_TAG = "workbench.role"  # "population" or "trial"
RESULTS_DIR_TAG = "workbench.results_dir"
TRIAL_ID_TAG = "workbench.trial_id"
CLONED_FROM_TAG = "workbench.cloned_from"  # the donor of the last exploit
LAST_EXPLOIT_TAG = "workbench.last_exploit"
ERROR_TAG = "workbench.error"  # a trial's final failure
LAST_FAILURE_TAG = "workbench.last_failure"  # a failure Tune retried
FAILURES_TAG = "workbench.failures"
STOPPED_BY_TAG = "workbench.stopped_by"
CHECKPOINT_FALLBACK_TAG = "workbench.checkpoint_fallback"  # a damaged checkpoint skipped
EVAL_TAG_PREFIX = "workbench.eval."
# The run's own evaluation (the end of a run): eval/<statistic> metrics.
EVAL_METRIC_PREFIX = "eval/"
EVAL_RETURN_METRIC = EVAL_METRIC_PREFIX + "return_mean"
EVAL_STD_METRIC = EVAL_METRIC_PREFIX + "return_std"
EVAL_EPISODES_METRIC = EVAL_METRIC_PREFIX + "episodes"
# What `workbench eval` logs when a user asks: beside the run's own eval/*, never over it
# (a 20-episode look must not replace the 100-episode confirmation `runs` reports).
USER_EVAL_METRIC_PREFIX = "user_eval/"
USER_EVAL_TAG_PREFIX = "workbench.user_eval."
# A trial's MLflow params under it: the values its final policy trained with, logged when
# it finishes (its params without it are the values it started with).
FINAL_PARAM_PREFIX = "final/"
# The population's result (workbench.run.population_result) on the population's run.
RESULT_RETURN_METRIC = "result/return_mean"
RESULT_STD_METRIC = "result/return_std"
RESULT_EPISODES_METRIC = "result/episodes"
RESULT_EVAL_ENV_STEPS_METRIC = "result/eval_env_steps"
RESULT_EVAL_TIME_METRIC = "result/eval_time_s"
RESULT_TRIAL_ID_TAG = "workbench.result.trial_id"
RESULT_TRIAL_TAG = "workbench.result.trial"
RESULT_ITERATION_TAG = "workbench.result.iteration"
RESULT_CHECKPOINT_TAG = "workbench.result.checkpoint"  # relative to the results folder
# The population's summary on its parent run, written when a run or resume ends, so that
# populations sort by it in the MLflow UI and in search_runs(order_by=...).
POPULATION_METRIC_PREFIX = "population/"
POPULATION_BEST_EVAL_METRIC = POPULATION_METRIC_PREFIX + "best_eval_return_mean"
POPULATION_BEST_RETURN_METRIC = POPULATION_METRIC_PREFIX + "best_return"
POPULATION_ENV_STEPS_METRIC = POPULATION_METRIC_PREFIX + "env_steps"
POPULATION_WALL_TIME_METRIC = POPULATION_METRIC_PREFIX + "wall_time_s"
POPULATION_TRIALS_METRIC = POPULATION_METRIC_PREFIX + "trials"
POPULATION_ERRORS_METRIC = POPULATION_METRIC_PREFIX + "errors"
GIT_DIRTY_TAG = "workbench.git.dirty"  # beside MLflow's mlflow.source.git.commit


def trial_name(trial: Any) -> str:
    """PPO_00003: the algorithm and the trial's index (Tune's default repeats the env id)."""
    return f"{trial.trainable_name}_{str(trial.trial_id).rsplit('_', 1)[-1]}"
