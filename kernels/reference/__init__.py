"""Plain PyTorch implementations of every kernel: the CPU path and the ground truth for the Triton kernels."""
