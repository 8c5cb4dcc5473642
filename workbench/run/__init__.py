"""The run: a resolved experiment becomes a Tune run of RLlib trials.

The Ray session, the schedulers and searchers (replay included), the stop rules, the
checkpoint guard, the live progress table, the results folder and the end summary;
`launch.run` and `launch.resume` put them together.
"""
