"""Tune's experiment-state sync, without Tune's own half-written files.

Tune writes its state files into a staging folder atomically: a temporary
``.<uuid4>-<name>`` file, then ``os.replace`` (``ray.tune.utils.util._atomic_save``).
A background thread copies the staging folder to the results folder, and a copy that
listed a temporary file just before it was renamed fails: "Saving experiment state to
storage ... failed" with a 20-line traceback after a successful run (the missing file was
a ``.<uuid>-callback-states-....pkl``), and the results folder keeps an older state until
the next sync. The workbench has the syncer leave those temporary files out: they are
never state, only state being written.
"""

from __future__ import annotations

from typing import Any

from ray.train._internal.storage import _FilesystemSyncer

# ".<uuid4>-<name>": 8-4-4-4-12 hexadecimal digits, the prefix _atomic_save gives.
ATOMIC_SAVE_TEMP = ".????????-????-????-????-????????????-*"
_PATCHED = "_workbench_skips_temp_files"


def sync_without_temp_files() -> None:
    """Make every filesystem syncer of this process skip Tune's temporary files
    (idempotent)."""
    if getattr(_FilesystemSyncer, _PATCHED, False):
        return
    original = _FilesystemSyncer._sync_up_command

    def _sync_up_command(
        self: Any, local_path: str, uri: str, exclude: list[str] | None = None
    ) -> Any:
        return original(self, local_path, uri, exclude=[*(exclude or []), ATOMIC_SAVE_TEMP])

    _FilesystemSyncer._sync_up_command = _sync_up_command  # type: ignore[method-assign]
    setattr(_FilesystemSyncer, _PATCHED, True)
