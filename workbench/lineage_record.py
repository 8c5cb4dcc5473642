"""The record of one PBT exploit, from the scheduler's decision to lineage.jsonl.

The scheduler (``workbench.tune_ext.pbt.ExploitRecorder``) hands its listeners an
``ExploitDecision``; the MLflow tracker numbers it and, once the target has restarted,
completes it into a ``LineageRecord`` (names, the iteration restored), which the writer
stamps with the run's step and appends to lineage.jsonl; ``workbench.analysis.lineage``
reads the same records back. One type from end to end, in the base layer every wing
may import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class ExploitDecision:
    """What PBT decided: `target` (at `target_iteration`) restarts from `source`'s
    checkpoint of `checkpoint_iteration` with the values `new` (`old` before, the
    donor's `donor`). `exploit_iteration` is the iteration whose result the decision was
    made on, which was the target's own (asynchronous PBT) or another trial's (synchronous
    PBT decides for paused trials at the last one's result): `decided_on_own_result`."""

    time: float
    target: str
    source: str
    target_iteration: int
    source_iteration: int
    exploit_iteration: int
    decided_on_own_result: bool
    target_name: str | None = None
    source_name: str | None = None
    checkpoint_iteration: int | None = None
    source_score_iteration: int | None = None
    old: dict[str, Any] = field(default_factory=dict, hash=False)
    donor: dict[str, Any] = field(default_factory=dict, hash=False)
    new: dict[str, Any] = field(default_factory=dict, hash=False)

    def renamed(self, names: Mapping[str, str]) -> ExploitDecision:
        """The same decision with its hyperparameters under the experiment's names."""

        def rename(values: dict[str, Any]) -> dict[str, Any]:
            return {names.get(k, k): v for k, v in values.items()}

        return dataclasses.replace(
            self, old=rename(self.old), donor=rename(self.donor), new=rename(self.new)
        )

    def numbered(self, seq: int) -> LineageRecord:
        """The lineage record of this exploit, number `seq` of its population."""
        return LineageRecord(
            seq=seq,
            time=self.time,
            target=self.target,
            target_name=self.target_name or self.target,
            source=self.source,
            source_name=self.source_name or self.source,
            target_iteration=self.target_iteration,
            source_iteration=self.source_iteration,
            step=self.target_iteration,
            old=dict(self.old),
            donor=dict(self.donor),
            new=dict(self.new),
            exploit_iteration=self.exploit_iteration,
            checkpoint_iteration=self.checkpoint_iteration,
            source_score_iteration=self.source_score_iteration,
        )


_REQUIRED = ("seq", "time", "target", "source", "target_iteration", "source_iteration")


@dataclass(frozen=True)
class LineageRecord:
    """One exploit: `target`, stopped at its `target_iteration`, restored `source`'s
    checkpoint of `source_iteration` and trains on from source_iteration + 1 with `new`.

    `old` are the target's values before, `donor` the source's at the time; `step` is
    the MLflow step the exploit was logged at.
    """

    seq: int
    time: float
    target: str
    target_name: str
    source: str
    source_name: str
    target_iteration: int
    source_iteration: int
    step: int  # the target_iteration until the writer knows the run's step
    old: dict[str, Any] = field(default_factory=dict, hash=False)
    donor: dict[str, Any] = field(default_factory=dict, hash=False)
    new: dict[str, Any] = field(default_factory=dict, hash=False)
    # Written by the workbench (Tune's pbt_global.txt has none of them): the iteration
    # whose result the exploit was decided on, the iteration of the donor checkpoint
    # PBT handed over, and the iteration the target actually continued from (seen in
    # its next result). source_iteration mirrors Tune's file, which reads the donor's
    # last result before Tune updates it: the donor whose result triggered the decision
    # shows the iteration before. source_score_iteration is the iteration of the donor's
    # result its score (the one that made it the donor) is from: the checkpoint handed
    # over is never older (workbench.tune_ext.pbt.donor_allowed).
    exploit_iteration: int | None = None
    restored_iteration: int | None = None
    checkpoint_iteration: int | None = None
    source_score_iteration: int | None = None

    @property
    def stopped_at(self) -> int:
        """The target's last iteration before the exploit."""
        return (
            self.exploit_iteration if self.exploit_iteration is not None else self.target_iteration
        )

    @property
    def restored_from(self) -> int:
        """The donor iteration the target continued from."""
        if self.restored_iteration is not None:
            return self.restored_iteration
        if self.checkpoint_iteration is not None:
            return self.checkpoint_iteration
        return self.source_iteration

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LineageRecord:
        missing = [name for name in _REQUIRED if name not in data]
        if missing:
            raise ValueError(f"lineage record lacks {', '.join(missing)}")
        try:
            return cls(
                seq=int(data["seq"]),
                time=float(data["time"]),
                target=str(data["target"]),
                target_name=str(data.get("target_name") or data["target"]),
                source=str(data["source"]),
                source_name=str(data.get("source_name") or data["source"]),
                target_iteration=int(data["target_iteration"]),
                source_iteration=int(data["source_iteration"]),
                step=int(
                    data["step"] if data.get("step") is not None else data["target_iteration"]
                ),
                old=dict(data.get("old") or {}),
                donor=dict(data.get("donor") or {}),
                new=dict(data.get("new") or {}),
                exploit_iteration=_optional_int(data.get("exploit_iteration")),
                restored_iteration=_optional_int(data.get("restored_iteration")),
                checkpoint_iteration=_optional_int(data.get("checkpoint_iteration")),
                source_score_iteration=_optional_int(data.get("source_score_iteration")),
            )
        except (TypeError, ValueError) as err:
            raise ValueError(f"bad lineage record: {err}") from err

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "time": self.time,
            "target": self.target,
            "target_name": self.target_name,
            "source": self.source,
            "source_name": self.source_name,
            "target_iteration": self.target_iteration,
            "source_iteration": self.source_iteration,
            "step": self.step,
            "old": dict(self.old),
            "donor": dict(self.donor),
            "new": dict(self.new),
            "exploit_iteration": self.exploit_iteration,
            "restored_iteration": self.restored_iteration,
            "checkpoint_iteration": self.checkpoint_iteration,
            "source_score_iteration": self.source_score_iteration,
        }
