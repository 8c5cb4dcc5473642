"""Analysis: populations read back from MLflow and the results folder.

Leaderboards and trials, lineage, diagnosis verdicts, schedule export, plots, the
timeline of a running population and the MLflow UI launcher.
"""
