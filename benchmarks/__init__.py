"""Benchmarks for grpolens: `make bench` (``python -m benchmarks.run``). Generated data lives in benchmarks/out/."""
