"""Qwen3.5-2B dimensions and the token counts the product sees: decode, agent turns, long prefills."""

from __future__ import annotations

HIDDEN = 2048
INTERMEDIATE = 6144
Q_HEADS, KV_HEADS, HEAD_DIM, ROTARY_DIM = 8, 2, 256, 64
GDN_HEADS, GDN_HEAD_DIM, CONV_WIDTH = 16, 128, 4
CONV_CHANNELS = 3 * GDN_HEADS * GDN_HEAD_DIM
ROPE_THETA = 1e7

# Rows of a token-wise op: decode, an agent turn (a 400-token tool result), long prefills.
TOKEN_COUNTS = (1, 400, 4096, 16384)
QUICK_TOKEN_COUNTS = (1, 400, 4096)
# (new tokens, prefix already in the cache) for prefill attention.
PREFILL_TURNS = ((400, 2048), (400, 8192), (4096, 0), (16384, 0))
QUICK_PREFILL_TURNS = ((400, 2048), (400, 8192), (4096, 0))
DECODE_CONTEXTS = (2048, 4096, 8192, 32768)
GDN_LENGTHS = (400, 2048, 8192)


def token_counts(quick: bool) -> tuple[int, ...]:
    return QUICK_TOKEN_COUNTS if quick else TOKEN_COUNTS
