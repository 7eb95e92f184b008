"""Benchmark suites for `attnzoo bench` and the harness they share (`harness`)."""
