"""The plan: one trial's placement group against a cluster, before anything starts.

Resources and bundles (read from RLlib), how many trials fit at once, whether the env
runners can feed the learner, and the pre-flight of `workbench run` against the live
cluster.
"""
