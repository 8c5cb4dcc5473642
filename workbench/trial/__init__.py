"""The trial: what runs inside one Tune trial's actor.

The RLlib AlgorithmConfig built from a resolved experiment, the trainable Tune runs
(per-trial seed, actor reuse), the RLlib callbacks that fix Ray 2.60's PBT problems and
measure each iteration's time split, and the fast env runner.
"""
