"""What every section of the experiment file's schema shares: strictness and the limits."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

MAX_TRIALS_EVER = 1_000_000
MAX_RUNNERS = 10_000  # env runners of one trial
MAX_ENVS = 1_000_000  # environments of one runner
MAX_CPUS = 1024.0  # CPUs of one bundle (one node's worth, generously)
MAX_GPUS = 64.0
MAX_MEMORY_GB = 65536.0  # memory of one process (far above any node's)


class _Strict(BaseModel):
    # Unknown keys are errors; so are .nan and .inf wherever a number goes.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)
