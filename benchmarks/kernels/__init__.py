"""Per-op kernel benchmarks on Qwen3.5-2B shapes: Triton against torch eager, torch.compile and optional peers."""
