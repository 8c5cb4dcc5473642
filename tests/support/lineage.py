"""An example PBT lineage: four trials, five exploits, and what a tracker keyed by
iteration holds of their hyperparameters (tests/unit/test_lineage.py's subject; the plots
draw it too)."""

from __future__ import annotations

from typing import Any

from workbench.lineage_record import LineageRecord

FINAL = 30


def lineage_record(
    seq: int,
    target: str,
    source: str,
    target_iteration: int,
    source_iteration: int,
    old: dict[str, Any],
    new: dict[str, Any],
) -> LineageRecord:
    return LineageRecord(
        seq=seq,
        time=1764420000.0 + 10 * seq,
        target=target,
        target_name=f"PPO_{target.upper()}",
        source=source,
        source_name=f"PPO_{source.upper()}",
        target_iteration=target_iteration,
        source_iteration=source_iteration,
        step=target_iteration,
        old=old,
        donor={},
        new=new,
    )


# Four trials a, b, c, d (lr 1, 2, 3, 4 and gamma 0.99 at the start), 30 iterations each.
# seq 0: b <- c@8 at b's 8      b trains 9.. with lr 3.5
# seq 1: a <- b@16 at a's 16    a trains 17.. with lr 4.5, gamma 0.95  (chain a <- b <- c)
# seq 2: c <- d@4 at c's 12     c restarts at 5 with lr 5: after c gave b its weights (seq 0)
# seq 3: d <- a@20 at d's 20    d trains 21.. with lr 6, gamma 0.95   (chain d <- a <- b <- c)
# seq 4: b <- c@22 at b's 24    the c that was itself a clone is now a donor
RECORDS = [
    lineage_record(0, "b", "c", 8, 8, {"lr": 2.0, "gamma": 0.99}, {"lr": 3.5, "gamma": 0.99}),
    lineage_record(1, "a", "b", 16, 16, {"lr": 1.0, "gamma": 0.99}, {"lr": 4.5, "gamma": 0.95}),
    lineage_record(2, "c", "d", 12, 4, {"lr": 3.0, "gamma": 0.99}, {"lr": 5.0, "gamma": 0.99}),
    lineage_record(3, "d", "a", 20, 20, {"lr": 4.0, "gamma": 0.99}, {"lr": 6.0, "gamma": 0.95}),
    lineage_record(4, "b", "c", 24, 22, {"lr": 3.5, "gamma": 0.99}, {"lr": 7.0, "gamma": 0.99}),
]
TRIALS = {t: (f"PPO_{t.upper()}", FINAL) for t in "abcd"}


def _history(*lives: tuple[int, int, float]) -> list[tuple[int, Any]]:
    """What a tracker keyed by iteration holds: one value per iteration, a later life
    overwriting the iterations it trained again."""
    values: dict[int, Any] = {}
    for first, last, value in lives:
        for iteration in range(first, last + 1):
            values[iteration] = value
    return sorted(values.items())


# Each trial's lives (first, last iteration, lr), as the exploits above make them.
LR = {
    "a": _history((1, 16, 1.0), (17, 30, 4.5)),
    "b": _history((1, 8, 2.0), (9, 24, 3.5), (23, 30, 7.0)),
    "c": _history((1, 12, 3.0), (5, 30, 5.0)),
    "d": _history((1, 20, 4.0), (21, 30, 6.0)),
}
GAMMA = {
    "a": _history((1, 16, 0.99), (17, 30, 0.95)),
    "b": _history((1, 30, 0.99)),
    "c": _history((1, 30, 0.99)),
    "d": _history((1, 20, 0.99), (21, 30, 0.95)),
}
HISTORIES = {t: {"lr": LR[t], "gamma": GAMMA[t]} for t in "abcd"}


def exploit_spacing_problems(records: list[LineageRecord], interval: int) -> list[str]:
    """What breaks "at most one exploit per interval per trial" in a lineage, one line
    each: per target, in the order of the exploits (``seq``),
    - the donor's checkpoint is at most one interval older than the iteration the
      exploit was decided at, and no older than the donor's score (where the record
      says which iteration that is from);
    - the target trained a full interval from its last restart before this exploit;
    - its restarts move forward by at least an interval (never rolled back to the same
      checkpoint, or earlier, again).
    """
    problems: list[str] = []
    previous: dict[str, LineageRecord] = {}
    for record in sorted(records, key=lambda r: r.seq):
        where = f"exploit {record.seq} of {record.target} (from {record.source})"
        if record.stopped_at - record.restored_from > interval:
            problems.append(
                f"{where}: decided at {record.stopped_at} on a checkpoint of "
                f"{record.restored_from}, more than {interval} old"
            )
        scored = record.source_score_iteration
        if scored is not None and record.restored_from < scored:
            problems.append(
                f"{where}: restarted from the donor's checkpoint of {record.restored_from}, "
                f"older than its score of {scored}"
            )
        before = previous.get(record.target)
        if before is not None:
            if record.stopped_at - before.restored_from < interval:
                problems.append(
                    f"{where}: at {record.stopped_at}, less than {interval} after its "
                    f"restart at {before.restored_from}"
                )
            if record.restored_from < before.restored_from + interval:
                problems.append(
                    f"{where}: restarted at {record.restored_from} after restarting at "
                    f"{before.restored_from}"
                )
        previous[record.target] = record
    return problems
