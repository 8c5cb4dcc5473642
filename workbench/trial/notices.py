"""A line said once per reason and process: when a fast path falls back to RLlib's own,
the user hears why once, in the log and on the console, not at every iteration."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

_NOTICED: set[str] = set()


def notice_once(message: str) -> None:
    """Log and print ``message`` the first time this process is told it."""
    if message not in _NOTICED:
        _NOTICED.add(message)
        logger.warning(message)
        print(f"[workbench] {message}", flush=True)
