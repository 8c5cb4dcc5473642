"""`workbench ui` in a real browser: the MLflow UI started on a small store and rendered in
headless Chromium (Debian's ``chromium``; `make test-deps` installs it). The UI is a React
app, so only a browser proves that the runs and the artifact actually appear."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.processes import process_table, wait_gone
from workbench.analysis.ui import UiServer, experiment_url, free_port, run_url, start_ui
from workbench.tracking.store import resolve_store

pytestmark = [
    # MLflow's sqlite store (the test builds one in this process) uses a loader strategy
    # SQLAlchemy deprecates; MLflow's to fix, not ours.
    pytest.mark.filterwarnings(
        "ignore:The ``noload`` loader strategy is deprecated:DeprecationWarning:mlflow.*"
    ),
]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _build_store(root: Path) -> dict[str, str]:
    """A population as the tracker writes it: a parent run, nested trial runs, a plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.create_experiment(
        "cartpole_pbt", artifact_location=(root / "mlartifacts").as_uri()
    )
    parent = client.create_run(experiment_id, run_name="cartpole-pbt").info.run_id
    children = []
    for index in range(3):
        child = client.create_run(
            experiment_id,
            run_name=f"PPO_{index:05d}",
            tags={"mlflow.parentRunId": parent},
        ).info.run_id
        client.log_param(child, "lr", f"{1e-3 * (index + 1):g}")
        client.log_param(child, "clip_param", "0.2")
        for step in range(4):
            client.log_metric(
                child, "env_runners/episode_return_mean", 20.0 * step + index, step=step
            )
            client.log_metric(child, "hp/lr", 1e-3 * (index + 1), step=step)
        client.set_terminated(child)
        children.append(child)

    figure, axes = plt.subplots(figsize=(3, 2))
    axes.plot([0, 1, 2], [0, 1, 0])
    plot = root / "plots" / "lineage.png"
    plot.parent.mkdir()
    figure.savefig(plot)
    plt.close(figure)
    client.log_artifact(parent, str(plot))
    client.set_terminated(parent)
    return {"uri": uri, "experiment_id": experiment_id, "parent": parent}


class Chromium:
    """Headless Chromium that renders a page and dumps its DOM, then is made sure gone.

    ``--dump-dom`` with ``--virtual-time-budget`` is enough for MLflow's React app:
    virtual time only advances while no request is pending, so the page has fetched
    its runs when the budget runs out (2-3 s of real time here).
    """

    def __init__(self, executable: str, root: Path) -> None:
        self.executable = executable
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.groups: set[int] = set()
        self.env = dict(os.environ)
        # Crash reports and caches stay in the test's folder, not the user's home.
        self.env["XDG_CONFIG_HOME"] = str(root / "config")
        self.env["XDG_CACHE_HOME"] = str(root / "cache")

    def dump_dom(self, url: str, budget_ms: int = 20000, timeout_s: float = 60) -> str:
        command = [
            self.executable,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            # No crash uploads. (--disable-crashpad-for-testing would also drop the crash
            # handler, but then the network service dies of an "FD ownership violation".)
            "--disable-crash-reporter",
            "--disable-breakpad",
            "--no-first-run",
            "--window-size=1600,1000",
            f"--user-data-dir={self.root / 'profile'}",
            f"--virtual-time-budget={budget_ms}",
            "--dump-dom",
            url,
        ]
        with (self.root / "chromium.log").open("ab") as log:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=self.env,
                start_new_session=True,
            )
        self.groups.add(process.pid)
        try:
            out, _ = process.communicate(timeout=timeout_s)
        finally:
            self.kill(process)
        return out.decode(errors="replace")

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        """The browser's process group, then its crash handlers (each in its own session,
        found by their database folder, which XDG_CONFIG_HOME puts in our folder)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        for pid, _, cmd in process_table():
            if "crashpad" in cmd and str(self.root) in cmd:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _render_until(
    chromium: Chromium, url: str, wanted: list[str], attempts: int = 3
) -> tuple[str, float]:
    """The DOM once every `wanted` string is in it (a slow first load gets more time)."""
    dom = ""
    for attempt in range(attempts):
        start = time.monotonic()
        dom = chromium.dump_dom(url, budget_ms=20000 * (attempt + 1))
        elapsed = time.monotonic() - start
        if all(w in dom for w in wanted):
            return dom, elapsed
    missing = [w for w in wanted if w not in dom]
    raise AssertionError(f"{url}: {missing} not in the rendered page:\n{dom[-3000:]}")


def _get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.headers.get("Content-Type", ""), response.read()


@pytest.mark.timeout(180)
def test_ui_shows_the_population_runs_and_artifacts(tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.fail(
            "chromium is not installed: `make test-deps` installs it "
            "(apt-get install --no-install-recommends chromium)"
        )
    store = _build_store(tmp_path / "results")
    chromium = Chromium(CHROMIUM, tmp_path / "browser")
    timings: dict[str, float] = {}
    server: UiServer | None = None
    try:
        start = time.monotonic()
        server = start_ui(
            resolve_store(str(tmp_path / "results")), port=free_port(), log_path=tmp_path / "ui.log"
        )
        timings["server start"] = time.monotonic() - start
        assert server.url.startswith("http://127.0.0.1:")
        experiment_id, parent = store["experiment_id"], store["parent"]

        # The runs table, default order (by start time): the population's parent run,
        # its trials nested (collapsed) under it.
        dom, timings["runs page"] = _render_until(
            chromium, experiment_url(server.url, experiment_id), ["cartpole-pbt"]
        )
        assert "cartpole_pbt" in dom  # the experiment

        # Sorted by a metric, MLflow lists nested runs flat: every trial is a row.
        flat = experiment_url(server.url, experiment_id) + (
            "&orderByKey=metrics.%60env_runners%2Fepisode_return_mean%60&orderByAsc=false"
        )
        trials = ["PPO_00000", "PPO_00001", "PPO_00002"]
        dom, timings["runs page, by return"] = _render_until(chromium, flat, trials)
        assert "cartpole-pbt" in dom

        # The parent run's artifact view renders the lineage plot the UI fetched.
        artifact_page = run_url(server.url, experiment_id, parent) + "/artifacts/lineage.png"
        dom, timings["artifact page"] = _render_until(
            chromium, artifact_page, ['artifact-name="lineage.png"', '<img alt="lineage.png"']
        )
        assert 'src="blob:' in dom.split('<img alt="lineage.png"', 1)[1][:200]

        # The same requests the UI makes, directly: the listing and the PNG itself.
        status, _, body = _get(f"{server.url}/ajax-api/2.0/mlflow/artifacts/list?run_id={parent}")
        assert status == 200 and b'"lineage.png"' in body
        status, content_type, body = _get(
            f"{server.url}/get-artifact?path=lineage.png&run_uuid={parent}"
        )
        assert status == 200
        assert content_type.startswith("image/png")
        assert body.startswith(b"\x89PNG\r\n\x1a\n")
        assert body == (tmp_path / "results" / "plots" / "lineage.png").read_bytes()
    finally:
        if server is not None:
            start = time.monotonic()
            server.stop()
            timings["server stop"] = time.monotonic() - start
        print("timings (s):", {k: round(v, 1) for k, v in timings.items()})

    assert server is not None and server.process.returncode is not None
    left = wait_gone(chromium.groups | {server.process.pid}, str(tmp_path))
    assert not left, f"processes left behind: {left}"
    # The server's log went to the file, with the requests the browser made.
    assert "/get-artifact" in (tmp_path / "ui.log").read_text()
