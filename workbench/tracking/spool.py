"""A population's spool: the MLflow writes its driver could not make (the store did not
answer by the end of the run), kept in the results folder as ``mlflow_pending.jsonl``.

A resume writes them first (the tracker's setup). A population that has finished has
nothing to resume, so `workbench resume` writes its spool with `write_spool`: no Ray, no
Tune, the runs the operations belong to found again in the store by their keys."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import ExperimentError
from workbench.files import write_atomic
from workbench.names import KEY_TAG, LINEAGE_FILE, PARENT, SPOOL_FILE
from workbench.tracking.callback import TrackingTarget
from workbench.tracking.store import check_store
from workbench.tracking.writer import Lineage, Op, OpenRun, StoreWriter, op_from_json, op_to_json


@dataclass
class SpoolWritten:
    """What `write_spool` wrote, and what is left in the spool (the store went away)."""

    spool: Path
    uri: str
    written: int
    left: int

    def line(self) -> str:
        if not self.left:
            return (
                f"Wrote the {self.written} MLflow operations spooled in {self.spool} "
                f"(the store did not answer at the end of the run) to {self.uri}."
            )
        return (
            f"The MLflow store {self.uri} stopped answering: wrote {self.written} spooled "
            f"operations, {self.left} remain in {self.spool}; run `workbench resume` again "
            "when it answers."
        )


def read_spool(spool: Path) -> list[Op]:
    """The spooled operations, in order; ExperimentError (one line) for a damaged file."""
    try:
        text = spool.read_text()
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) else str(err)
        raise ExperimentError.single(str(spool), "", f"cannot be read ({why})") from None
    ops = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            ops.append(op_from_json(line))
        except (ValueError, KeyError, TypeError) as err:
            raise ExperimentError.single(
                str(spool),
                f"line {number}",
                f"is not a spooled MLflow operation ({type(err).__name__}: {err}); nothing "
                "was written (remove the line to write the others)",
            ) from None
    return ops


def _handle(op: Op) -> str:
    return op.target if isinstance(op, Lineage) else op.handle


def _runs_in_store(
    writer: StoreWriter, target: TrackingTarget, handles: set[str]
) -> dict[str, str]:
    """handle -> run id of the runs the store holds for `handles` (the tracker's keys)."""
    client = writer.client()
    experiment = client.get_experiment_by_name(target.experiment)
    if experiment is None:
        return {}
    # The keys the tracker gives the population's runs (and gave them before, if any).
    keys = [target.key, *getattr(target, "legacy_keys", ())]
    out: dict[str, str] = {}
    for handle in sorted(handles):
        for key in keys:
            run_key = key if handle == PARENT else f"{key}::{handle}"
            found = client.search_runs(
                [experiment.experiment_id],
                filter_string=f"tags.`{KEY_TAG}` = '{run_key}'",
                max_results=1,
            )
            if found:
                out[handle] = str(found[0].info.run_id)
                break
    return out


def write_spool(
    target: TrackingTarget, *, on_event: Callable[[str], None] | None = None
) -> SpoolWritten | None:
    """Writes the population's spool to its store (None: there is no spool).

    Raises ExperimentError (one line, the spool kept) when the store cannot be read or
    does not hold the runs the operations belong to. What the store does not take within
    the tracker's flush timeout stays in the spool for the next try.
    """
    spool = target.results_dir / SPOOL_FILE
    if not spool.is_file():
        return None
    ops = read_spool(spool)
    check_store(target.uri)
    opened = {op.handle for op in ops if isinstance(op, OpenRun)}
    parents = {op.parent for op in ops if isinstance(op, OpenRun) and op.parent is not None}
    needed = ({_handle(op) for op in ops} | parents) - opened
    writer = StoreWriter(
        target.uri,
        target.experiment,
        artifact_root=target.artifact_root,
        lineage_file=target.results_dir / LINEAGE_FILE,
        on_event=on_event or (lambda message: print(f"[workbench] {message}", flush=True)),
    )
    runs = _runs_in_store(writer, target, needed) if needed else {}
    missing = sorted(needed - runs.keys())
    if missing:
        raise ExperimentError.single(
            str(spool),
            "",
            f"its operations belong to runs the MLflow store {target.uri} does not hold "
            f"({', '.join(missing)} of population {target.population}); nothing was written",
        )
    writer.runs.update(runs)
    for op in ops:
        writer.put(op)
    left = writer.close(target.flush_timeout_s)
    if left:
        write_atomic(spool, "".join(op_to_json(op) + "\n" for op in left))
    else:
        spool.unlink()
    return SpoolWritten(spool, target.uri, len(ops) - len(left), len(left))
