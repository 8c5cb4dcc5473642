"""A command run as a person runs it in a terminal (a pseudo-terminal of a given size),
and the screen it leaves: what a user sees once it is done, scrollback included.

The screen is replayed from the bytes the command wrote with the few control sequences
a redrawing view uses (carriage return, cursor up/down/column, erase line/screen; colours
ignored), so a table redrawn in place is one table on the screen however many times it
was drawn, and a table printed again and again is as many tables.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Sequence
from pathlib import Path

_CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b[()][0-9A-Za-z]|\x1b[=>78]")


def run_in_terminal(
    argv: Sequence[str],
    cwd: Path,
    *,
    columns: int = 120,
    rows: int = 40,
    timeout_s: float = 600,
    env: dict[str, str] | None = None,
) -> tuple[int, str]:
    """Runs ``argv`` with stdin, stdout and stderr on a new pseudo-terminal of
    ``columns`` x ``rows``; returns its exit code and everything it wrote (decoded)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    environment = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns)}
    environment.pop("NO_COLOR", None)
    process = subprocess.Popen(
        list(argv),
        cwd=cwd,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**environment, **(env or {})},
        start_new_session=True,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        else:
            process.kill()
        code = process.wait(timeout=30)
    finally:
        os.close(master)
    return code, b"".join(chunks).decode("utf-8", errors="replace")


def screen(output: str, columns: int = 120) -> list[str]:
    """The lines ``output`` leaves on a terminal ``columns`` wide, trailing blanks cut."""
    lines: list[list[str]] = [[]]
    row = col = 0

    def put(char: str) -> None:
        nonlocal col
        if col >= columns:
            newline()
        line = lines[row]
        if len(line) <= col:
            line.extend(" " * (col - len(line) + 1))
        line[col] = char
        col += 1

    def newline() -> None:
        nonlocal row, col
        row += 1
        col = 0
        while len(lines) <= row:
            lines.append([])

    position = 0
    for match in _CSI.finditer(output + "\x1b[0m"):
        for char in output[position : match.start()]:
            if char == "\n":
                newline()
            elif char == "\r":
                col = 0
            elif char == "\b":
                col = max(0, col - 1)
            elif char >= " ":
                put(char)
        position = match.end()
        params, final = match.group(1), match.group(2)
        if final is None:
            continue
        count = int(params) if params and params.isdigit() else 1
        if final == "A":
            row = max(0, row - count)
        elif final == "B":
            row += count
            while len(lines) <= row:
                lines.append([])
        elif final == "G":
            col = count - 1
        elif final == "K":
            if params in ("", "0"):
                del lines[row][col:]
            elif params == "1":
                lines[row][:col] = [" "] * min(col, len(lines[row]))
            else:
                lines[row] = []
        elif final == "J" and params in ("", "0"):
            del lines[row][col:]
            del lines[row + 1 :]
    text = ["".join(line).rstrip() for line in lines]
    while text and not text[-1]:
        text.pop()
    return text
