"""The experiment: what a user writes, read and checked before anything starts.

The typed schema of an experiment file, its resolution (search space, defaults,
algorithm and environment checks) into a `ResolvedExperiment`, and the catalogues it is
checked against. Nothing here starts Ray or touches MLflow.
"""
