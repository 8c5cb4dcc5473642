"""Tracking: a population's MLflow runs, written so they stay correct under PBT,
restores and store outages.

Which store, which metrics, the background writer and the Tune callback. The tag and
file names it shares with the readers live in `workbench.names`.
"""
