"""Files written whole: a reader, or a process killed at any moment, finds the old
content or the new, never half of it (results folders are read while populations run, by
`workbench runs`, resumes and other drivers)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def temporary_name(path: Path) -> Path:
    """Where `write_atomic` stages `path`: a hidden, unique name beside it (the same
    filesystem, so the rename is atomic; unique, so two writers do not share it)."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")


def write_atomic(path: Path, text: str, *, fsync: bool = False) -> Path:
    """Writes `text` to `path` through a temporary file renamed into place; `fsync` also
    flushes it to the disk first (a file that must survive a power cut, not only a kill)."""
    temporary = temporary_name(path)
    try:
        with temporary.open("w") as f:
            f.write(text)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path
