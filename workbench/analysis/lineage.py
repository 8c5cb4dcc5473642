"""PBT lineage: who cloned whom, what a final policy was trained in, and with which values.

A PBT exploit overwrites a trial's weights with a donor's checkpoint, so a trial's
name says little about its final policy: that policy went through pieces of several
trials, each with its own hyperparameters. The tracking callback writes one JSON line
per exploit (a lineage record); this module reads them back and answers, without Ray
or MLflow, which iterations of which trials a final policy was trained in (its
ancestry) and the hyperparameters along that path (its stitched schedule).

`seq` orders exploits in time. Iterations do not: an exploit restores the target to
the donor's iteration, which may be earlier than the target's own.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.lineage_record import LineageRecord

# hyperparameter -> [(tune iteration, value the iteration was trained with), ...]
History = Mapping[str, Sequence[tuple[int, Any]]]
Schedule = dict[str, list[tuple[int, Any]]]


def parse_jsonl(text: str) -> list[LineageRecord]:
    """Records in file order. A last line without its newline that is not valid JSON is
    skipped: the writer may be in the middle of it (the file is read while a run goes on)."""
    records: list[LineageRecord] = []
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines):  # no newline after it: still being written
                break
            raise ValueError(f"line {number}: not JSON ({err.msg})") from err
        if not isinstance(data, dict):
            raise ValueError(f"line {number}: expected a JSON object")
        try:
            records.append(LineageRecord.from_dict(data))
        except ValueError as err:
            raise ValueError(f"line {number}: {err}") from err
    return records


def read_jsonl(path: str | os.PathLike[str]) -> list[LineageRecord]:
    return parse_jsonl(Path(path).read_text(encoding="utf-8"))


def check_sequence(records: Iterable[LineageRecord]) -> list[str]:
    """Gaps and duplicates in `seq` (0, 1, 2, ...): a gap is a lost exploit, so any
    ancestry through it would be wrong; a duplicate makes the time order ambiguous."""
    counts = Counter(record.seq for record in records)
    problems: list[tuple[int, str]] = []
    expected = 0
    for seq in sorted(counts):
        if seq < 0:
            problems.append((seq, f"seq {seq} is negative"))
            continue
        if seq > expected:
            gap = f"seq {expected}" if seq == expected + 1 else f"seq {expected}-{seq - 1}"
            problems.append((expected, f"{gap} missing"))
        if counts[seq] > 1:
            problems.append((seq, f"seq {seq} appears {counts[seq]} times"))
        expected = seq + 1
    return [message for _, message in sorted(problems, key=lambda item: item[0])]


@dataclass(frozen=True)
class Segment:
    """Iterations first..last of one trial that a policy was trained in.

    `via` is the exploit that put the policy into this trial (None: the trial's own
    start). `retrained` are ranges of these iterations that the trial trained again
    later, after another exploit restored it to an earlier iteration: a history keyed
    by iteration shows that later life there, not this one.
    """

    trial_id: str
    trial_name: str
    first_iteration: int
    last_iteration: int
    via: LineageRecord | None = field(default=None, compare=False)
    retrained: tuple[tuple[int, int], ...] = ()

    @property
    def iterations(self) -> int:
        return max(0, self.last_iteration - self.first_iteration + 1)


def _ordered(records: Iterable[LineageRecord]) -> list[LineageRecord]:
    return sorted(records, key=lambda record: (record.seq, record.time))


def _names(records: Iterable[LineageRecord]) -> dict[str, str]:
    names: dict[str, str] = {}
    for record in records:
        names.setdefault(record.target, record.target_name)
        names.setdefault(record.source, record.source_name)
    return names


def _retrained(
    later: Sequence[LineageRecord], first: int, last: int
) -> tuple[tuple[int, int], ...]:
    """Which of first..last the lives that `later` (exploits into the trial, in time
    order) started trained again. The last life runs on to an unknown final iteration."""
    ranges: list[tuple[int, int]] = []
    for index, record in enumerate(later):
        end = later[index + 1].stopped_at if index + 1 < len(later) else last
        low, high = max(first, record.restored_from + 1), min(last, end)
        if low <= high:
            ranges.append((low, high))
    merged: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return tuple(merged)


def _chain(
    records: Iterable[LineageRecord], trial_id: str, final_iteration: int, name: str | None
) -> list[Segment]:
    """The ancestry, newest piece first."""
    ordered = _ordered(records)
    names = _names(ordered)
    if name is not None:
        names[trial_id] = name
    into: dict[str, list[LineageRecord]] = {}
    for record in ordered:
        into.setdefault(record.target, []).append(record)
    pieces: list[Segment] = []
    trial, last, before = trial_id, final_iteration, math.inf
    while True:
        exploits = into.get(trial, [])
        # The latest exploit into `trial` before the one we came through (by seq) whose
        # life holds iteration `last`: a life restored to s reports from s + 1 on, so PBT
        # can only have saved checkpoints of s + 1 and later in it.
        via = next(
            (r for r in reversed(exploits) if r.seq < before and r.restored_from < last),
            None,
        )
        first = 1 if via is None else via.restored_from + 1
        later = [r for r in exploits if via is None or r.seq > via.seq]
        pieces.append(
            Segment(
                trial_id=trial,
                trial_name=names.get(trial, trial),
                first_iteration=first,
                last_iteration=last,
                via=via,
                retrained=_retrained(later, first, last),
            )
        )
        if via is None:
            return pieces
        trial, last, before = via.source, via.restored_from, via.seq


def ancestry(
    records: Iterable[LineageRecord],
    trial_id: str,
    final_iteration: int,
    *,
    name: str | None = None,
) -> list[Segment]:
    """The pieces of training the final policy of `trial_id` went through, oldest first.

    Walking back from the end, each trial's piece starts after the latest exploit into it
    that happened (by `seq`) before the exploit we came through and restored it to an
    iteration before the piece's last: exploits into a donor after it saved the checkpoint
    it gave do not touch that policy, and neither do those that restored it to a later
    iteration than that checkpoint's (then the checkpoint is from an earlier life). Names
    come from the records (`name` for a trial that never appears in one).
    """
    return [s for s in reversed(_chain(records, trial_id, final_iteration, name)) if s.iterations]


def ancestry_exploits(
    records: Iterable[LineageRecord], trial_id: str, final_iteration: int
) -> list[LineageRecord]:
    """The exploits the final policy of `trial_id` came through, oldest first."""
    chain = _chain(records, trial_id, final_iteration, None)
    return [s.via for s in reversed(chain) if s.via is not None]


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b)
    except Exception:  # e.g. arrays: not comparable to one truth value
        return False


def _covered(iteration: int, ranges: Sequence[tuple[int, int]]) -> bool:
    return any(low <= iteration <= high for low, high in ranges)


def stitched_schedule(segments: Sequence[Segment], histories: Mapping[str, History]) -> Schedule:
    """Each hyperparameter's values along the ancestry, compressed to change points.

    `histories` maps trial id -> hyperparameter -> [(iteration, value)] with one value per
    iteration (a step function; the later of two entries for one iteration wins). Where a
    segment's iterations were retrained later, the history shows that later life, so there
    the segment keeps the value it started with (PBT and PB2 change values only at
    exploits), taken from the history where it is this life's, else from the exploit.
    """
    hyperparameters: list[str] = []
    for segment in segments:
        for name in histories.get(segment.trial_id, {}):
            if name not in hyperparameters:
                hyperparameters.append(name)
    if not hyperparameters:  # no histories: the exploits alone still say the values
        for segment in segments:
            for name in segment.via.new if segment.via else {}:
                if name not in hyperparameters:
                    hyperparameters.append(name)

    schedule: Schedule = {}
    for name in hyperparameters:
        points: list[tuple[int, Any]] = []
        for segment in segments:
            for iteration, value in _segment_points(segment, histories, name):
                if not points or not _same(points[-1][1], value):
                    points.append((iteration, value))
        if points:
            schedule[name] = points
    return schedule


def _segment_points(
    segment: Segment, histories: Mapping[str, History], name: str
) -> list[tuple[int, Any]]:
    by_iteration = {
        int(it): value for it, value in histories.get(segment.trial_id, {}).get(name, [])
    }
    iterations = sorted(by_iteration)
    first, last = segment.first_iteration, segment.last_iteration
    start = bisect_right(iterations, first) - 1
    points: list[tuple[int, Any]] = []
    if start >= 0 and not _covered(first, segment.retrained):
        points.append((first, by_iteration[iterations[start]]))
    elif segment.via is not None and name in segment.via.new:
        points.append((first, segment.via.new[name]))
    elif start >= 0:  # the best guess left: what the history holds there now
        points.append((first, by_iteration[iterations[start]]))
    for iteration in iterations[start + 1 : bisect_right(iterations, last)]:
        if not _covered(iteration, segment.retrained):
            points.append((iteration, by_iteration[iteration]))
    return points


def format_value(value: Any) -> str:
    """Floats to 4 significant digits; everything else as str."""
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return f"{float(value):.4g}"
    return str(value)


def changed_hyperparameters(record: LineageRecord) -> dict[str, tuple[Any, Any]]:
    """name -> (old, new) for the values the exploit changed in the target."""
    names = list(record.new) + [n for n in record.old if n not in record.new]
    changes = {n: (record.old.get(n), record.new.get(n)) for n in names}
    return {n: pair for n, pair in changes.items() if not _same(*pair)}


def describe_changes(record: LineageRecord, limit: int | None = None) -> str:
    """`lr 0.001→0.0024, gamma 0.99→0.98`; at most `limit` of them, then `+N more`."""
    parts = [
        f"{n} {format_value(a)}→{format_value(b)}"
        for n, (a, b) in changed_hyperparameters(record).items()
    ]
    if not parts:
        return "no change"
    if limit is not None and len(parts) > limit:
        parts = [*parts[:limit], f"+{len(parts) - limit} more"]
    return ", ".join(parts)


@dataclass
class _Version:
    """A trial's weights between two exploits into it: a node of the clone tree."""

    trial: str
    via: LineageRecord | None
    first: int
    last: int = 0
    children: list[_Version] = field(default_factory=list)


def _population(
    trials: Mapping[str, tuple[str, int]], records: Sequence[LineageRecord]
) -> dict[str, tuple[str, int]]:
    """`trials` plus any trial only the records know (final: the latest iteration seen)."""
    known = dict(trials)
    for record in records:
        for trial, name, iteration in (
            (record.target, record.target_name, record.stopped_at),
            (record.source, record.source_name, record.restored_from),
        ):
            if trial not in trials:
                _, seen = known.get(trial, (name, 0))
                known[trial] = (name, max(seen, iteration))
    return known


def _range(first: int, last: int) -> str:
    return f"[{first}-{last}]" if first <= last else "[-]"


def render_tree(
    trials: Mapping[str, tuple[str, int]],
    records: Iterable[LineageRecord],
    best: str | None = None,
    best_iteration: int | None = None,
    no_exploits: str = "no exploits yet",
) -> str:
    """The population as a tree of who cloned whom, for the terminal.

    Roots are the trials as they started; each exploit is a branch under the donor's
    weights at that time, itself the parent of later clones of the target. `[a-b]` are the
    iterations those weights were trained in. `*` marks the best trial's policy of
    ``best_iteration`` (the population's result; default: its final policy) and its
    ancestry. `trials` maps trial id -> (name, final iteration).
    """
    ordered = _ordered(records)
    population = _population(trials, ordered)
    ids = sorted(population, key=lambda t: (population[t][0], t))
    roots = {t: _Version(t, None, first=1) for t in ids}
    versions = {t: [roots[t]] for t in ids}  # each trial's, in time order
    by_record: dict[int, _Version] = {}
    for record in ordered:
        node = by_record[id(record)] = _Version(
            record.target, record, first=record.restored_from + 1
        )
        # The donor's weights that hold the checkpoint: as in `ancestry`, the latest
        # version that started at or before its iteration.
        donor = next(
            (v for v in reversed(versions[record.source]) if v.first <= record.restored_from),
            roots[record.source],
        )
        donor.children.append(node)
        versions[record.target][-1].last = record.stopped_at
        versions[record.target].append(node)
    for trial, lives in versions.items():
        lives[-1].last = population[trial][1]

    marked: set[int] = set()
    best_node: _Version | None = None
    if best is not None and best in population:
        at = population[best][1] if best_iteration is None else best_iteration
        chain = _chain(ordered, best, at, population[best][0])
        marked = {id(s.via) for s in chain if s.via is not None}
        newest = chain[0].via
        best_node = roots[best] if newest is None else by_record[id(newest)]
        marked.add(id(roots[chain[-1].trial_id]))

    def on_path(node: _Version) -> bool:
        return id(node if node.via is None else node.via) in marked

    lines: list[str] = []
    # Depth first, without recursion: a long run's chain of clones can be deep.
    stack: list[tuple[_Version, str, str]] = [(roots[t], "", "") for t in reversed(ids)]
    while stack:
        node, prefix, branch = stack.pop()
        name = population[node.trial][0]
        if node.via is None:
            text = f"{name}  {_range(node.first, node.last)}"
        else:
            r = node.via
            donor_name = population[r.source][0]
            text = (
                f"it {r.stopped_at}: {name} <- {donor_name}@{r.restored_from}"
                f"  {describe_changes(r)}  {_range(node.first, node.last)}"
            )
        if node is best_node:
            text += "  (best)"
        lines.append(("* " if on_path(node) else "  ") + prefix + branch + text)
        below = prefix + {"": "", "└─ ": "   ", "├─ ": "│  "}[branch]
        last = len(node.children) - 1
        for index in range(last, -1, -1):
            stack.append((node.children[index], below, "└─ " if index == last else "├─ "))

    if not ordered:
        lines.append(f"  ({no_exploits})")
    if best_node is not None and best_iteration is not None:
        lines.append(
            f"  * = the population's result, {population[best_node.trial][0]}'s policy of "
            f"iteration {best_iteration}, and the weights it came from"
        )
    elif best_node is not None:
        lines.append(
            f"  * = the best trial {population[best_node.trial][0]}'s final policy "
            "and the weights it came from"
        )
    return "\n".join(lines)
