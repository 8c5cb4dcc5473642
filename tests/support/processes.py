"""Process bookkeeping (Linux /proc): a test leaves no server or browser behind."""

from __future__ import annotations

import os
import time
from pathlib import Path


def process_table() -> list[tuple[int, int, str]]:
    """(pid, process group, command line) of every live process (Linux /proc)."""
    table = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z":  # a zombie is already dead
            continue
        table.append((int(entry.name), int(fields[2]), cmdline))
    return table


def leftovers(groups: set[int], text: str) -> list[str]:
    return [
        f"{pid} {cmd[:160]}"
        for pid, group, cmd in process_table()
        if pid != os.getpid() and (group in groups or text in cmd)
    ]


def wait_gone(groups: set[int], text: str, timeout_s: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while (left := leftovers(groups, text)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left
