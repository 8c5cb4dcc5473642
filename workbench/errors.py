"""Errors a user can act on: which file, which field, which value, what would be valid."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input file."""

    file: str
    field: str  # dotted path, "" for the file as a whole
    message: str  # says the value and what would be valid

    def __str__(self) -> str:
        """One line: a newline or other control character in a key or a value the
        message quotes is shown escaped, so each problem stays a line of its own."""
        where = f"{self.file}: {self.field}" if self.field else self.file
        return _one_line(f"{where}: {self.message}")


def _one_line(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class ExperimentError(Exception):
    """Invalid input: the CLI prints every problem and exits with status 2."""

    exit_code = 2

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    @classmethod
    def single(cls, file: str, field: str, message: str) -> ExperimentError:
        return cls([Problem(file, field, message)])


class Interrupted(Exception):
    """The run was stopped before Tune could save its state (Ctrl-C twice): the CLI says
    what is left and exits 130, as a shell reports Ctrl-C."""

    exit_code = 130


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def one_of(choices: Iterable[str]) -> str:
    return ", ".join(repr(c) for c in sorted(choices))
