"""A lean Qwen3.5 inference engine: loader, tokenizer, forward pass, caches, sessions and sampling."""
