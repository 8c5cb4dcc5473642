"""A bad experiment file must fail the same way everywhere: an ExperimentError (the CLI's
exit code 2) whose problems name the file, the field, the value and what would be valid."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.errors import ExperimentError, Problem
from workbench.experiment.resolve import load_and_resolve


def rejected(path: Path, *, check_results: bool = False) -> ExperimentError:
    """The error ``load_and_resolve`` raises for a bad file; also checks that the CLI turns
    the same problems into exit code 2 (``validate`` never looks at the results folder)."""
    with pytest.raises(ExperimentError) as info:
        load_and_resolve(path, check_results=check_results)
    err = info.value
    assert err.exit_code == 2
    assert err.problems, "an ExperimentError must carry at least one problem"
    if not check_results:
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            assert main(["validate", str(path)]) == 2
        assert str(err) in stderr.getvalue()
    return err


def problem_about(err: ExperimentError, file: Path, field: str, *fragments: str) -> Problem:
    """The problem reported against ``file`` that names ``field`` and every fragment."""
    candidates = [p for p in err.problems if p.file == str(file) and field in str(p)]
    assert candidates, f"no problem in {file} naming {field!r}; got:\n{err}"
    for problem in candidates:
        if all(fragment in str(problem) for fragment in fragments):
            return problem
    pytest.fail(f"no problem in {file} about {field!r} says all of {fragments!r}; got:\n{err}")
