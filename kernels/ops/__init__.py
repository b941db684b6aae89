"""Triton kernels, one op per module, each with a launcher that validates its inputs and allocates outputs."""
