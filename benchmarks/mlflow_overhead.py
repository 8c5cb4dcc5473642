"""Per-result MLflow logging cost: the workbench's Tune callback vs Ray's MLflowLoggerCallback.

Usage::

    .venv/bin/python benchmarks/mlflow_overhead.py            # real RLlib results, defaults
    .venv/bin/python benchmarks/mlflow_overhead.py --synthetic --rounds 1 --results 20

What is compared, on the same results and the same kind of store (a fresh sqlite file per
case per round, ``sqlite:///<tmp>/<case>.db``), in one process:

* ``ray``: ``ray.air.integrations.mlflow.MLflowLoggerCallback`` driven as Tune drives a
  ``LoggerCallback``: ``setup()``, ``log_trial_start(trial)`` per trial, then
  ``log_trial_result(iteration, trial, result)`` per result, ``log_trial_end(trial)``. It
  writes synchronously inside ``log_trial_result``, so its per-result figure is the time of
  that call.
* ``workbench``: ``workbench.tracking.MlflowTracker`` (``setup``, ``on_trial_start``,
  ``on_trial_result``, ``on_trial_complete``, ``finish``), which only queues a result in
  ``on_trial_result`` and writes it from a background thread. Three figures:

  - ``enqueue``: the time Tune's loop spends in ``on_trial_result`` (the results are fed
    back to back, so the writer thread competes with it for the GIL meanwhile);
  - ``end to end`` (the headline): wall time from the first ``on_trial_result`` until
    ``tracker.writer.flush()`` returns with everything written, over the number of results.
    Results fed back to back let the writer merge a backlog into fewer ``log_batch`` calls;
  - ``one by one``: ``on_trial_result`` then ``flush()`` for every result, i.e. each result
    written alone, as when results arrive seconds apart in a real run.

The results: ``--real-results`` (default 3) dicts returned by ``algo.train()`` of the RLlib
PPO that ``experiments/cartpole_pbt.yaml`` builds (``sim_ext/CartPole-v1``), collected once
with ``ray.init(num_cpus=1)`` (about 40 s) and cached in ``--results-cache`` (read only if
this user owns it: it is a pickle); ``--synthetic`` fabricates dicts of the same nested shape
and size instead (no Ray, for tests). The stream a case
logs cycles through them, round-robin over ``--trials`` fake Tune trials (``trial_id``,
``trainable_name``, ``config`` with the searched hyperparameters set per trial, ``status``,
``local_path``/``path``/``logdir``), each result a shallow copy whose ``training_iteration``
counts that trial's results and whose ``config`` is its trial's.

Method:

* Before anything is timed, each store is created and migrated (MLflow's first use of a
  sqlite file runs its schema migrations, seconds), the experiment exists and every trial's
  run is open (Ray: ``log_trial_start``, which logs the whole config as params one call each;
  the workbench: ``on_trial_start`` and a flush). Those start costs are printed apart.
* Interleaved rounds (``--rounds``, default 5): each round runs Ray over ``--results-ray``
  results (default 15: it takes about a second per result), the workbench end to end and then one by
  one over ``--results`` results each (default 200), on fresh stores; the order Ray/workbench
  alternates from round to round. A round's figure is its mean ms per result; the table gives
  the median, min and max over rounds, and Ray's median over each workbench median.
* MLflow calls per result: the public methods of ``MlflowClient`` are wrapped (counting only
  the outermost call per thread) while results are logged. Ray makes a new client for every
  call and checks the run exists first (``get_run``); the workbench uses one client.
* ``tracker.finish()`` (end statuses, the population's PNGs rendered from the store) and
  ``log_trial_end`` run after the timed part.

Targets: the workbench's end-to-end median at most 20 ms per result and Ray's median at least
50x it. ``--check`` makes the exit status 1 when either misses; otherwise it is 0 (a
measurement, not a test).
"""

from __future__ import annotations

import os

# Ray reads this when imported.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import argparse
import contextlib
import datetime
import functools
import gc
import inspect
import json
import logging
import platform
import shlex
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/mlflow_overhead.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import EXPERIMENT, ROOT, cpu_model, median_min_max
from benchmarks.mlflow_results import (
    FakeTrial,
    load_real_results,
    result_shape,
    result_stream,
    synthetic_result,
    trial_configs,
)

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning, module=r"(mlflow|ray|pydantic)(\.|$)")

DEFAULT_CACHE = Path(tempfile.gettempdir()) / "workbench_mlflow_overhead_results.pkl"
TARGET_MS = 20.0  # workbench end to end, median ms per result, at most
TARGET_RATIO = 50.0  # Ray's median over the workbench's, at least
CASES = {
    "ray": "Ray MLflowLoggerCallback",
    "wb_enqueue": "workbench on_trial_result (enqueue)",
    "wb_e2e": "workbench end to end (to flush)",
    "wb_onebyone": "workbench one by one (flush each)",
}
HEADLINE = "wb_e2e"


def quiet_loggers() -> None:
    for name in ("mlflow", "alembic", "ray", "ray.rllib", "ray.tune", "ray.air", "urllib3"):
        logging.getLogger(name).setLevel(logging.ERROR)


# --- counting MLflow calls -----------------------------------------------------------------
class ClientCalls:
    """Counts the outermost calls of MlflowClient's public methods (all threads)."""

    def __init__(self) -> None:
        from mlflow.tracking import MlflowClient

        self._cls = MlflowClient
        self._local = threading.local()
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.counting = False
        self._saved: dict[str, Any] = {}
        for name, attr in list(vars(MlflowClient).items()):
            if name.startswith("_") or not inspect.isfunction(attr):
                continue
            self._saved[name] = attr
            setattr(MlflowClient, name, self._wrap(name, attr))

    def _wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        counter = self

        @functools.wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(counter._local, "depth", 0)
            if depth == 0 and counter.counting:
                with counter._lock:
                    counter.counts[name] = counter.counts.get(name, 0) + 1
            counter._local.depth = depth + 1
            try:
                return method(*args, **kwargs)
            finally:
                counter._local.depth = depth

        return wrapper

    @contextlib.contextmanager
    def count(self) -> Iterator[dict[str, int]]:
        counts: dict[str, int] = {}
        with self._lock:
            self.counts = counts
            self.counting = True
        try:
            yield counts
        finally:
            with self._lock:
                self.counting = False
                self.counts = {}

    def restore(self) -> None:
        for name, attr in self._saved.items():
            setattr(self._cls, name, attr)


# --- the cases -----------------------------------------------------------------------------
@dataclass
class Figures:
    """One case, all rounds."""

    ms_per_result: list[float] = field(default_factory=list)
    calls_per_result: list[float] = field(default_factory=list)
    calls_by_method: dict[str, int] = field(default_factory=dict)
    start_s_per_trial: list[float] = field(default_factory=list)
    results: int = 0


def fresh_store(folder: Path, name: str, experiment: str) -> str:
    """A sqlite store, migrated, with the experiment made (artifacts in `folder`)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{folder / (name + '.db')}"
    artifacts = folder / f"{name}-artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri=uri)
    client.create_experiment(experiment, artifact_location=artifacts.resolve().as_uri())
    return uri


def run_ray(
    folder: Path,
    results: list[dict[str, Any]],
    configs: list[dict[str, Any]],
    count: int,
    calls: ClientCalls,
    figures: Figures,
) -> None:
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    uri = fresh_store(folder, "ray", "bench")
    trials = [FakeTrial(i, c, folder / "ray-trials" / f"t{i}") for i, c in enumerate(configs)]
    stream = result_stream(results, trials, count)
    callback = MLflowLoggerCallback(tracking_uri=uri, experiment_name="bench")
    callback.setup()
    start = time.perf_counter()
    for trial in trials:
        callback.log_trial_start(trial)
    figures.start_s_per_trial.append((time.perf_counter() - start) / len(trials))

    gc.collect()
    spent = 0.0
    with calls.count() as counted:
        for trial, result in stream:
            t0 = time.perf_counter()
            callback.log_trial_result(result["training_iteration"], trial, result)
            spent += time.perf_counter() - t0
    for trial in trials:
        trial.status = "TERMINATED"
        callback.log_trial_end(trial, failed=False)

    figures.ms_per_result.append(spent * 1000 / count)
    figures.calls_per_result.append(sum(counted.values()) / count)
    for name, n in counted.items():
        figures.calls_by_method[name] = figures.calls_by_method.get(name, 0) + n
    figures.results += count


def make_tracker(
    folder: Path, name: str, hyperparameters: dict[str, str], metrics: str | list[str]
) -> tuple[Any, list[str]]:
    from workbench.tracking.callback import MlflowTracker, TrackingTarget

    uri = fresh_store(folder, name, "bench")
    target = TrackingTarget(
        uri=uri,
        experiment="bench",
        population="bench",
        key=str(folder / name),
        results_dir=folder / name,
        artifact_root=folder / f"{name}-artifacts",
        metrics=metrics,
        hyperparameters=hyperparameters,
    )
    events: list[str] = []
    return MlflowTracker(target, on_event=events.append), events


def run_workbench(
    folder: Path,
    results: list[dict[str, Any]],
    configs: list[dict[str, Any]],
    count: int,
    hyperparameters: dict[str, str],
    metrics: str | list[str],
    calls: ClientCalls,
    figures: dict[str, Figures],
) -> None:
    for mode in ("wb_e2e", "wb_onebyone"):
        tracker, events = make_tracker(folder, mode, hyperparameters, metrics)
        trials = [
            FakeTrial(i, c, folder / f"{mode}-trials" / f"t{i}") for i, c in enumerate(configs)
        ]
        stream = result_stream(results, trials, count)
        tracker.setup()
        start = time.perf_counter()
        for trial in trials:
            tracker.on_trial_start(iteration=0, trials=trials, trial=trial)
        if not tracker.writer.flush(timeout_s=600):
            raise RuntimeError(f"the workbench's store did not answer: {events}")
        figures[mode].start_s_per_trial.append((time.perf_counter() - start) / len(trials))

        gc.collect()
        enqueue = 0.0
        with calls.count() as counted:
            if mode == "wb_e2e":
                first = time.perf_counter()
                for i, (trial, result) in enumerate(stream):
                    t0 = time.perf_counter()
                    tracker.on_trial_result(iteration=i, trials=trials, trial=trial, result=result)
                    enqueue += time.perf_counter() - t0
                flushed = tracker.writer.flush(timeout_s=600)
                total = time.perf_counter() - first
            else:
                total = 0.0
                for i, (trial, result) in enumerate(stream):
                    t0 = time.perf_counter()
                    tracker.on_trial_result(iteration=i, trials=trials, trial=trial, result=result)
                    flushed = tracker.writer.flush(timeout_s=600)
                    total += time.perf_counter() - t0
                    if not flushed:
                        break
        if not flushed:
            raise RuntimeError(f"the workbench's store did not answer: {events}")
        written = tracker.writer.written_results
        for trial in trials:
            trial.status = "TERMINATED"
            tracker.on_trial_complete(iteration=count, trials=trials, trial=trial)
        tracker.finish("FINISHED", trials)
        if written != count or events:
            raise RuntimeError(f"the workbench wrote {written} of {count} results: {events}")

        cases = [mode, "wb_enqueue"] if mode == "wb_e2e" else [mode]
        for case in cases:
            fig = figures[case]
            spent = enqueue if case == "wb_enqueue" else total
            fig.ms_per_result.append(spent * 1000 / count)
            fig.calls_per_result.append(sum(counted.values()) / count)
            for name, n in counted.items():
                fig.calls_by_method[name] = fig.calls_by_method.get(name, 0) + n
            fig.results += count


# --- report --------------------------------------------------------------------------------
def fmt_ms(ms: float) -> str:
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def table(figures: dict[str, Figures], shape: dict[str, int]) -> str:
    ray_median = statistics.median(figures["ray"].ms_per_result)
    metrics = {"ray": shape["ray_metrics"]}
    lines = [
        "| case | results/round | median ms/result | min | max | MLflow calls/result "
        "| metrics/result | Ray median / median |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case, label in CASES.items():
        fig = figures[case]
        if not fig.ms_per_result:
            continue
        median, low, high = median_min_max(fig.ms_per_result)
        per_round = fig.results // len(fig.ms_per_result)
        calls = statistics.median(fig.calls_per_result)
        n_metrics = metrics.get(case, shape["workbench_metrics_with_hp"])
        ratio = ray_median / median if median > 0 else float("inf")
        lines.append(
            f"| {label} | {per_round} | {fmt_ms(median)} | {fmt_ms(low)} "
            f"| {fmt_ms(high)} | {calls:.2f} | {n_metrics} | {ratio:.1f}x |"
        )
    return "\n".join(lines)


def verdict(figures: dict[str, Figures]) -> tuple[bool, str]:
    wb = statistics.median(figures[HEADLINE].ms_per_result)
    ray = statistics.median(figures["ray"].ms_per_result)
    ratio = ray / wb if wb > 0 else float("inf")
    ok = wb <= TARGET_MS and ratio >= TARGET_RATIO
    return ok, (
        f"{'PASS' if ok else 'FAIL'}: workbench end to end {wb:.2f} ms/result "
        f"(target <= {TARGET_MS:g}), Ray {ray:.0f} ms/result, {ratio:.1f}x faster "
        f"(target >= {TARGET_RATIO:g}x)"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument(
        "--results", type=int, default=200, help="workbench results per round (default 200)"
    )
    p.add_argument("--results-ray", type=int, default=15, help="Ray results per round (default 15)")
    p.add_argument("--trials", type=int, default=4, help="trials the results cycle over")
    p.add_argument(
        "--synthetic", action="store_true", help="a fabricated result instead of RLlib's"
    )
    p.add_argument(
        "--real-results", type=int, default=3, help="algo.train() results to collect (3)"
    )
    p.add_argument(
        "--results-cache",
        type=Path,
        default=DEFAULT_CACHE,
        help=f"pickle of the real results (default {DEFAULT_CACHE})",
    )
    p.add_argument(
        "--metrics",
        default="curated",
        help="what the workbench logs: curated (its default), all, or comma-separated globs",
    )
    p.add_argument("--json", metavar="PATH", help="write the per-round figures here")
    p.add_argument(
        "--check",
        action="store_true",
        help=f"exit 1 unless the workbench is <= {TARGET_MS:g} ms/result end to end "
        f"and >= {TARGET_RATIO:g}x faster than Ray",
    )
    args = p.parse_args(argv)
    if args.metrics not in ("curated", "all"):
        args.metrics = [m for m in args.metrics.split(",") if m]
    if min(args.rounds, args.results, args.results_ray, args.trials, args.real_results) < 1:
        p.error("--rounds, --results, --results-ray, --trials, --real-results must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # with stderr's
    import mlflow
    import ray

    quiet_loggers()  # after MLflow's import, which sets its logger's level

    from workbench.experiment.resolve import load_and_resolve
    from workbench.tracking.metrics import hp_metric, metric_filter

    python = (
        os.path.relpath(sys.executable) if ROOT in Path(sys.executable).parents else sys.executable
    )
    script = os.path.relpath(__file__) if Path.cwd() in Path(__file__).parents else __file__
    print("command: " + shlex.join([python, script, *(sys.argv[1:] if argv is None else argv)]))
    print(
        f"{datetime.datetime.now().isoformat(timespec='seconds')}  {os.cpu_count()} CPUs "
        f"({cpu_model()})  python {platform.python_version()}  mlflow {mlflow.__version__}  "
        f"ray {ray.__version__}  sqlite {sqlite3.sqlite_version}"
    )
    with tempfile.TemporaryDirectory(prefix="mlflow-overhead-resolve-") as tmp:
        resolved = load_and_resolve(str(EXPERIMENT), [f"storage={tmp}"], check_results=False)
    hyperparameters = {key: name for name, key in resolved.tune_keys.items()}

    if args.synthetic:
        results = [synthetic_result(seed) for seed in range(args.real_results)]
        source = f"{len(results)} synthetic results shaped like RLlib's (--synthetic)"
    else:
        results, source = load_real_results(args.real_results, args.results_cache)
    quiet_loggers()  # Ray's init may have reset them
    shape = result_shape(results[-1], metric_filter(args.metrics))
    searched = [k for k in hyperparameters if hp_metric(results[-1]["config"].get(k)) is not None]
    shape["workbench_metrics_with_hp"] = shape["workbench_metrics"] + len(searched)
    print(f"results: {source}")
    print(
        f"one result: {shape['flat_keys']} flattened keys ({shape['config_keys']} under config), "
        f"{shape['numbers_outside_config']} numbers outside config; Ray logs "
        f"{shape['ray_metrics']} metrics, the workbench {shape['workbench_metrics']} "
        f"({args.metrics}) "
        f"+ {len(searched)} hp/* = {shape['workbench_metrics_with_hp']}"
    )
    print(
        f"rounds={args.rounds} results={args.results} results_ray={args.results_ray} "
        f"trials={args.trials} store=sqlite (fresh file per case per round)"
    )

    base_config = results[-1]["config"]
    configs = trial_configs(base_config, hyperparameters, args.trials)
    figures = {case: Figures() for case in CASES}
    calls = ClientCalls()
    try:
        for r in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix=f"mlflow-overhead-{r}-") as tmp:
                folder = Path(tmp)

                def ray_case(folder: Path = folder) -> None:
                    run_ray(folder, results, configs, args.results_ray, calls, figures["ray"])

                def wb_case(folder: Path = folder) -> None:
                    run_workbench(
                        folder,
                        results,
                        configs,
                        args.results,
                        hyperparameters,
                        args.metrics,
                        calls,
                        figures,
                    )

                order = [ray_case, wb_case] if r % 2 == 0 else [wb_case, ray_case]
                for case in order:
                    case()
            print(
                f"round {r + 1}/{args.rounds}: Ray {figures['ray'].ms_per_result[-1]:.0f} "
                f"ms/result, workbench end to end {figures[HEADLINE].ms_per_result[-1]:.2f}",
                file=sys.stderr,
            )
    finally:
        calls.restore()

    print()
    print(table(figures, shape))
    print()
    starts = {
        "ray": "Ray log_trial_start (config as params)",
        "wb_e2e": "workbench on_trial_start + flush",
    }
    for case, label in starts.items():
        ms = statistics.median(figures[case].start_s_per_trial) * 1000
        print(f"start of a trial, untimed above: {label}: {ms:.0f} ms")
    for case in ("ray", HEADLINE, "wb_onebyone"):
        fig = figures[case]
        by = ", ".join(
            f"{name} {n / fig.results:.2f}"
            for name, n in sorted(fig.calls_by_method.items(), key=lambda kv: -kv[1])
        )
        print(f"MLflow calls per result, {CASES[case]}: {by}")
    ok, line = verdict(figures)
    print()
    print(line)
    for case in ("wb_enqueue", "wb_onebyone"):
        ms = statistics.median(figures[case].ms_per_result)
        print(f"(not checked) {CASES[case]}: {ms:.2f} ms/result")

    if args.json:
        raw = {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "argv": argv if argv is not None else sys.argv[1:],
            "versions": {"mlflow": mlflow.__version__, "ray": ray.__version__},
            "cpu_model": cpu_model(),
            "nproc": os.cpu_count(),
            "source": source,
            "shape": shape,
            "cases": {
                case: {
                    "label": CASES[case],
                    "ms_per_result": fig.ms_per_result,
                    "median_ms": statistics.median(fig.ms_per_result),
                    "calls_per_result": fig.calls_per_result,
                    "start_s_per_trial": fig.start_s_per_trial,
                }
                for case, fig in figures.items()
            },
            "pass": ok,
        }
        Path(args.json).write_text(json.dumps(raw, indent=2))
        print(f"raw figures written to {args.json}")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
