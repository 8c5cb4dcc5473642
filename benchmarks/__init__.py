"""Benchmark scripts (run each as a file: python benchmarks/NAME.py); shared helpers in
`benchmarks.common`. Their recorded figures are in docs/benchmarks/."""
