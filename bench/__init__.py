"""Benchmarks: each script prints ratios against a baseline run in the same process (`python -m bench.NAME`)."""
