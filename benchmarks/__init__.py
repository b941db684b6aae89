"""Accuracy evaluation and speed benchmarks for sqlscout."""
