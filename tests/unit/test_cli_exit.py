"""How the `workbench` command ends (`workbench.cli.main.entry`): Python's exit up to the
teardown of the modules, which it skips. The command's exit code, everything it printed
(buffered, through a pipe), its log files and every atexit hook its libraries registered
(Ray's shutdown among them) survive; the objects the modules hold are never freed one by
one (a module-level object's finaliser marks the teardown). A command that fails with a
traceback exits the usual way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# A stand-in for a command: it prints more than a pipe's buffer without flushing, logs to
# a file, registers an atexit hook as Ray and MLflow do when imported, and holds an object
# whose finaliser runs only when Python tears its modules down.
COMMAND = """
import atexit, logging, sys
from pathlib import Path
import importlib
cli = importlib.import_module("workbench.cli.main")  # the package exports a `main` function

out = Path(sys.argv[1])
how = sys.argv[2]

class Held:
    def __del__(self):
        (out / "torn_down").write_text("yes")

held = Held()

def command(argv=None):
    atexit.register(lambda: (out / "hook_ran").write_text("yes"))
    log = logging.getLogger("command")
    log.addHandler(logging.FileHandler(out / "command.log"))
    log.warning("logged")
    print("x" * 200_000)
    print("last line")
    if how == "raises":
        raise RuntimeError("a bug")
    return 3

cli.main = command
if how == "plain":
    sys.exit(cli.main())
cli.entry()
"""


def _command(tmp_path: Path, how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", COMMAND, str(tmp_path), how],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_command_ends_without_tearing_its_modules_down_and_loses_nothing(
    tmp_path: Path,
) -> None:
    done = _command(tmp_path, "entry")
    assert done.returncode == 3, done.stderr
    assert done.stdout.endswith("x" * 200_000 + "\nlast line\n")
    assert (tmp_path / "hook_ran").is_file()
    assert (tmp_path / "command.log").read_text() == "logged\n"
    assert not (tmp_path / "torn_down").exists()


def test_pythons_own_exit_tears_the_modules_down(tmp_path: Path) -> None:
    # The cost entry() skips: without it, the held object is freed at exit.
    done = _command(tmp_path, "plain")
    assert done.returncode == 3, done.stderr
    assert (tmp_path / "torn_down").is_file()


def test_a_command_that_fails_with_a_traceback_exits_the_usual_way(tmp_path: Path) -> None:
    done = _command(tmp_path, "raises")
    assert done.returncode == 1
    assert "RuntimeError: a bug" in done.stderr
    assert done.stdout.endswith("last line\n")
    assert (tmp_path / "hook_ran").is_file()
    assert (tmp_path / "torn_down").is_file()


def test_the_command_waits_for_the_processes_of_the_ray_it_started_to_end() -> None:
    import threading
    import time

    from workbench.run.ray_session import await_ray_exit, start_time

    def recorded(seconds: float) -> tuple[subprocess.Popen[bytes], dict[str, object]]:
        process = subprocess.Popen(["sleep", str(seconds)])
        return process, {"processes": [[process.pid, start_time(process.pid)]], "raylets": []}

    # A raylet's agent that ends a moment after Ray's shutdown returned: waited for.
    ending, record = recorded(0.5)
    started = time.monotonic()
    assert await_ray_exit(5.0, records=[record]) == []
    assert 0.3 < time.monotonic() - started < 4.0
    ending.wait()
    # One that does not end: the wait gives up at its bound and names it.
    stuck, record = recorded(30)
    try:
        started = time.monotonic()
        assert await_ray_exit(0.3, records=[record]) == [stuck.pid]
        assert time.monotonic() - started < 2.0
        # Ended but not yet reaped by its parent (a zombie): gone.
        stuck.kill()
        time.sleep(0.2)
        assert await_ray_exit(0.3, records=[record]) == []
    finally:
        stuck.kill()
        threading.Thread(target=stuck.wait).start()


def test_at_its_end_the_command_kills_what_of_its_ray_outlived_the_wait() -> None:
    import threading
    import time

    from workbench.run.ray_session import start_time, stop_ray_started_here

    # An agent still running when the wait ends (on a busy machine it can take longer
    # than the wait to notice its raylet is gone), and a process nobody recorded.
    stuck = subprocess.Popen(["sleep", "30"])
    other = subprocess.Popen(["sleep", "30"])
    record = {"processes": [[stuck.pid, start_time(stuck.pid)]], "raylets": []}
    try:
        started = time.monotonic()
        assert stop_ray_started_here(0.3, records=[record]) == [stuck.pid]
        assert stuck.wait(timeout=5) == -9
        assert time.monotonic() - started < 3.0
        assert other.poll() is None
        # Nothing left: nothing killed.
        assert stop_ray_started_here(0.3, records=[record]) == []
    finally:
        for process in (stuck, other):
            process.kill()
            threading.Thread(target=process.wait).start()
