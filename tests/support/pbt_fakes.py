"""Stand-ins for unit tests of the workbench's PBT mixins: a trial Tune would hand them,
and Tune's own half of PBT, recording what the mixins asked of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FakeTrial:
    trial_id: str
    experiment_tag: str = ""


class Recorder:
    """Tune's half: records what it was asked to do."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, list[Any], list[Any]]] = []
        self.exploited: list[tuple[Any, Any]] = []

    def _checkpoint_or_exploit(
        self, trial: Any, tune_controller: Any, upper: list[Any], lower: list[Any]
    ) -> None:
        self.calls.append((trial, list(upper), list(lower)))

    def _exploit(self, tune_controller: Any, trial: Any, trial_to_clone: Any) -> None:
        self.exploited.append((trial, trial_to_clone))
