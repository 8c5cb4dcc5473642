"""One command line: every command explains itself with examples, shares the inspection
options, reports an unknown option with its own usage, completes in the shell and stops
quietly when its reader closes the pipe."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.stores import new_store
from workbench.cli.main import _build, _parse, main

WORKBENCH = str(Path(sys.executable).parent / "workbench")
INSPECTION = ("runs", "show", "lineage", "diagnose", "eval", "export-schedule", "export-policy")


def test_every_command_has_a_description_and_an_example() -> None:
    parsers = _build()[1]
    assert {"envs", "schema", "validate", "ui", "completion", *INSPECTION} <= set(parsers)
    for name, parser in parsers.items():
        text = parser.format_help()
        assert parser.description and len(parser.description) > 20, name
        examples = text.split("examples:\n", 1)[1]
        assert f"workbench {name}" in examples, f"{name} has no example of itself"


@pytest.mark.parametrize("command", INSPECTION)
def test_the_inspection_commands_share_store_json_and_population(command: str) -> None:
    required = {"show": ["X"], "eval": ["X"], "export-policy": ["X", "-o", "d"]}.get(command, [])
    if command == "export-schedule":
        required = ["-o", "f.yaml"]
    args = _parse([command, *required, "--store", "s", "--json", "--population", "p"])
    assert (args.store, args.json, args.population) == ("s", True, "p")
    assert args.reads_store  # a store that fails while read is one line, not a traceback


def test_a_population_given_twice_must_agree(capsys: pytest.CaptureFixture[str]) -> None:
    assert _parse(["lineage", "a", "--population", "a"]).population == "a"
    with pytest.raises(SystemExit) as exit_info:
        main(["lineage", "a", "--population", "b", "--store", "nowhere"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: workbench lineage ")
    assert "--population b and the POPULATION argument a disagree" in err


def test_a_bare_workbench_prints_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 0
    out = capsys.readouterr()
    assert out.out.startswith("usage: workbench ")
    assert "validate" in out.out and "resume" in out.out
    assert out.err == ""


@pytest.mark.parametrize("command", [["lineage"], ["runs"], ["show", "PPO_00000"]])
def test_an_unknown_option_prints_the_commands_usage(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--no-such-option"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: workbench {command[0]} ")
    assert f"workbench {command[0]}: error: unrecognized arguments: --no-such-option" in err


def test_completion_scripts_name_the_commands_and_their_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    for word in ("export-policy", "--population", "--wide", "--dry-run"):
        assert word in script
    checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr
    # What bash offers for `workbench ru<TAB>` and `workbench runs --<TAB>`.
    probe = (
        script
        + "\nCOMP_WORDS=(workbench ru); COMP_CWORD=1; _shtab_workbench; echo ${COMPREPLY[@]}"
        + "\nCOMP_WORDS=(workbench runs --); COMP_CWORD=2; _shtab_workbench; "
        + "echo ${COMPREPLY[@]}"
    )
    offered = subprocess.run(["bash", "-c", probe], text=True, capture_output=True, check=True)
    first, second = offered.stdout.splitlines()
    assert first.split() == ["run", "runs"]
    assert {"--store", "--json", "--population", "--wide"} <= set(second.split())
    assert main(["completion", "zsh"]) == 0
    assert "#compdef workbench" in capsys.readouterr().out


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`workbench lineage --json | head -1`: more JSON than the pipe holds, its reader gone
    after one line."""
    store = new_store(tmp_path / "results")
    pop = store.population("pop")
    store.trial(pop, "PPO_00000", returns=[1.0])
    store.trial(pop, "PPO_00001", returns=[2.0])
    record = {
        "time": 1.0,
        "target": "abc_00001",
        "target_name": "PPO_00001",
        "source": "abc_00000",
        "source_name": "PPO_00000",
        "target_iteration": 1,
        "source_iteration": 1,
        "old": {"lr": 0.3},
        "new": {"lr": 0.2},
    }
    store.lineage(pop, [{**record, "seq": i} for i in range(2000)])
    shell = shutil.which("bash")
    assert shell
    done = subprocess.run(
        [shell, "-c", f"set -o pipefail; {WORKBENCH} lineage --json --store {store.uri} | head -1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout == "[\n"
    assert done.stderr == "", done.stderr  # no BrokenPipeError, no traceback
    assert done.returncode == 141  # as a process that SIGPIPE ended: `set -o pipefail` sees it
    whole = subprocess.run(
        [WORKBENCH, "lineage", "--json", "--store", store.uri],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert len(whole.stdout) > 200_000  # more than any pipe buffers: the writer met the close
    assert len(json.loads(whole.stdout)) == 2000


def test_the_command_line_starts_without_the_heavy_libraries() -> None:
    """`workbench --help` and completion answer at once: each command imports what it
    needs itself."""
    code = (
        "import sys\n"
        "from workbench.cli.main import _build\n"
        "_build()\n"
        "heavy = ('ray', 'torch', 'mlflow', 'gymnasium', 'matplotlib', 'shtab', 'numpy')\n"
        "print(' '.join(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == ""
