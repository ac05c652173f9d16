"""Benchmarks: each measures ours and a baseline in the same run and prints the ratio."""
