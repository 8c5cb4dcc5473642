"""The inspection commands on the shared PBT population (tests/conftest.py): what each
prints fits the terminal, whatever the real metric names, and JSON counts are integers."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from workbench.cli.main import main


@pytest.mark.parametrize("columns", [80, 100])
def test_every_inspection_command_fits_the_terminal(
    pbt_population: SimpleNamespace,
    columns: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    store = ["--store", str(pbt_population.root / "results")]
    best = pbt_population.summary.best.name
    commands = [
        ["runs"],
        ["runs", "pbt"],
        ["show", best],
        ["lineage", "--population", "pbt"],
        ["diagnose", "pbt"],
    ]
    for command in commands:
        assert main([*command, *store]) == 0, command
        out = capsys.readouterr().out
        # Only a line of one word may be longer: a metric's name, the store's path.
        long = [line for line in out.splitlines() if len(line) > columns and len(line.split()) > 1]
        assert not long, (command, long)
    assert main(["show", best, *store, "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)["metrics"]
    assert type(metrics["training_iteration"]) is int
    assert type(metrics["num_env_steps_sampled_lifetime"]) is int
    assert main(["runs", "pbt", *store, "--wide"]) == 0
    assert max(len(line) for line in capsys.readouterr().out.splitlines()[1:]) > columns
