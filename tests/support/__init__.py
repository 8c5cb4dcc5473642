"""What several test modules share: experiment builders, fakes, example data, probes."""
