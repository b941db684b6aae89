"""llama.cpp as the CPU benchmark's peer: built from the llama-cpp-python sdist, fed our checkpoints as GGUF
files, timed with llama-bench, served with llama-server and asked for logits through its Python bindings."""
