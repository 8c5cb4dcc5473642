"""The trainable Tune runs: the RLlib algorithm class with a per-trial seed and a
``reset_config`` so that Tune can reuse its actor."""

from __future__ import annotations

from functools import cache
from typing import Any

from ray.tune.result import TRIAL_INFO


def trial_seed(base_seed: int, trial_id: str) -> int:
    """A trial's seed from the experiment seed and the trial's index in the run.

    Tune's trial ids end in the trial's index (``a1b2c_00003``), which is the same
    in every run of the same experiment and survives restores and PBT exploits.
    """
    try:
        index = int(str(trial_id).rsplit("_", 1)[-1])
    except ValueError:
        index = 0
    return (base_seed * 0x9E3779B1 + index * 0x85EBCA77 + 0x165667B1) % (2**31 - 1)


# What Tune's Trainable.reset has set up for the next trial (its log files) and
# Trainable.__init__ would clear: kept across the rebuild in reset_config.
_RESET_KEEPS = (
    "_stdout_context",
    "_stdout_fp",
    "_stdout_stream",
    "_stderr_context",
    "_stderr_fp",
    "_stderr_stream",
    "_stderr_logging_handler",
    "_stdout_file",
    "_stderr_file",
)


@cache
def seeded_trainable(algo_class: type) -> type:
    """The algorithm class with a per-trial seed set before RLlib builds anything, and
    a ``reset_config`` so that Tune can reuse its actor (``reuse_actors=True``)."""

    class Seeded(algo_class):  # type: ignore[misc,valid-type]
        def __init__(self, config: Any = None, **kwargs: Any) -> None:
            if isinstance(config, dict) and config.get(TRIAL_INFO) is not None:
                config = dict(config)
                seed = trial_seed(int(config.get("seed") or 0), config[TRIAL_INFO].trial_id)
                config["seed"] = seed
            super().__init__(config=config, **kwargs)

        def reset_config(self, new_config: dict[str, Any]) -> bool:
            """Tune hands this actor to a trial (after a PBT pause or exploit, or a new
            one): the algorithm is rebuilt in this process exactly as a new actor would
            build it from ``new_config``, then Tune restores the trial's checkpoint into
            it. What is saved is the new process: ~3.8 s of importing torch and RLlib
            per exploit (docs/benchmarks/tune-overhead.md). RLlib's Algorithm has no
            reset_config, and without one Tune fails the trial at its first reuse."""
            self.cleanup()  # learners, env runners (remote ones are new actors again)
            kept = {name: getattr(self, name, None) for name in _RESET_KEEPS}
            config = dict(new_config)
            if self._trial_info is not None:
                config[TRIAL_INFO] = self._trial_info  # the trial's seed comes from its id
            type(self).__init__(self, config=config, storage=self._storage)
            for name, value in kept.items():
                setattr(self, name, value)
            return True

    Seeded.__name__ = Seeded.__qualname__ = algo_class.__name__
    return Seeded
