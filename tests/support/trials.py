"""Tune's trials as the workbench's callbacks read them, without Tune."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeTrial:
    """The attributes of ``ray.tune.experiment.Trial`` the MLflow tracker reads."""

    trial_id: str
    config: dict[str, Any]
    trainable_name: str = "PPO"
    status: str = "RUNNING"
    error_file: str | None = None
    last_result: dict[str, Any] = field(default_factory=dict)
    num_failures: int = 0
