"""Many questions at once, against answering them one after another: python -m benchmarks.concurrency."""
