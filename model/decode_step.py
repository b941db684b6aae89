"""One batched decode step over fixed buffers, reading nothing back to the host: a CUDA graph can record it, and
torch.compile captures it on the CPU as a single graph (forward pass, sampling and bookkeeping together)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from model.cache import ModelCache
from model.qwen35 import Qwen35Model
from model.sampling import sample
from model.sampling_params import SamplingParams


@dataclass(frozen=True)
class StepBuffers:
    """The tensors a decode step reads and writes in place, one entry per row (see decode_workspace.DecodeWorkspace)."""

    tokens: torch.Tensor  # the token each row feeds in
    start: torch.Tensor  # its position, the row's length so far
    active: torch.Tensor  # rows still generating
    generated: torch.Tensor  # tokens generated so far
    limit: torch.Tensor  # tokens each row may generate
    out: torch.Tensor  # [B, max_tokens] the generated tokens; column `spare` takes those of rows sitting out
    temperature: torch.Tensor  # [1], read on the device so that one step serves any value
    top_p: torch.Tensor  # [1]


def is_stop(tokens: torch.Tensor, stop_ids: torch.Tensor) -> torch.Tensor:
    """Whether each token is a stop id, by a broadcast compare that a CUDA graph can hold."""
    return (tokens[:, None] == stop_ids[None, :]).any(-1)


def decode_step(
    model: Qwen35Model,
    cache: ModelCache,
    buffers: StepBuffers,
    stop: torch.Tensor,
    spare: int,
    sampling: SamplingParams,
    noise: torch.Tensor | None,
    masked: bool = True,
) -> None:
    """Feed each active row's token, sample its next one and advance the row until it samples one of the stop
    ids (padded with -1) or reaches its limit; rows sitting out keep their state (their scratch key goes to
    their own length, their token to column `spare`). masked False skips the sit-out masking, for a caller
    that knows every row is active."""
    b = buffers
    was_active = b.active
    logits = model.decode(b.tokens[:, None], b.start, cache, active=was_active if masked else None)
    new = sample(logits, sampling, noise, temperature=b.temperature, top_p=b.top_p)
    column = torch.where(was_active, b.generated, spare)
    b.out.scatter_(1, column[:, None], new[:, None])
    b.start.add_(was_active)
    b.generated.add_(was_active)
    b.tokens.copy_(torch.where(was_active, new, b.tokens))
    b.active.copy_(was_active & ~is_stop(new, stop) & (b.generated < b.limit))


@functools.cache
def compiled_decode_step():
    """decode_step compiled once per process, shapes symbolic so that one graph serves every KV length, batch
    size and session; each sampling mode gets its own graph."""
    return torch.compile(decode_step, dynamic=True)
