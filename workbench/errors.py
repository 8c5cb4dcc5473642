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
        where = f"{self.file}: {self.field}" if self.field else self.file
        return f"{where}: {self.message}"


class ExperimentError(Exception):
    """Invalid input: the CLI prints every problem and exits with status 2."""

    exit_code = 2

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    @classmethod
    def single(cls, file: str, field: str, message: str) -> ExperimentError:
        return cls([Problem(file, field, message)])


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def one_of(choices: Iterable[str]) -> str:
    return ", ".join(repr(c) for c in sorted(choices))
