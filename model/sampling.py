"""On-device token sampling: temperature, top-k, top-p (nucleus), greedy at temperature 0."""

from __future__ import annotations

import torch

from model.sampling_params import SamplingParams


def make_generator(params: SamplingParams, device: torch.device) -> torch.Generator:
    generator = torch.Generator(device=device)
    if params.seed is None:
        generator.seed()
    else:
        generator.manual_seed(params.seed)
    return generator


def filtered_probabilities(
    logits: torch.Tensor,
    params: SamplingParams,
    *,
    temperature: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Probabilities [B, k] over each row's candidate tokens and the candidates' ids [B, k].

    Candidates are the top_k tokens (the whole vocabulary when top_k <= 0), cut to the smallest set whose
    probability reaches top_p; the most likely token always stays. temperature and top_p, when given, are
    device tensors holding params' values (a captured graph reads them there, so one graph serves any value).
    """
    k = candidate_count(params, logits.shape[-1])
    values, ids = torch.topk(logits.float(), k, dim=-1)
    probs = torch.softmax(values / (params.temperature if temperature is None else temperature), dim=-1)
    if params.top_p < 1:
        # Drop a candidate when the more likely ones before it already reach top_p.
        before = probs.cumsum(-1) - probs
        probs = probs.masked_fill(before >= (params.top_p if top_p is None else top_p), 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs, ids


def candidate_count(params: SamplingParams, vocab_size: int) -> int:
    """How many candidates each row keeps before top_p: the width of the noise sample() needs."""
    return params.top_k if 0 < params.top_k < vocab_size else vocab_size


def sampling_mode(params: SamplingParams, vocab_size: int) -> tuple[int, bool] | None:
    """What the sampling ops depend on beyond values kept on the device: None when greedy, else (candidates
    per row, top_p filter on). Steps captured for one mode serve every temperature and top_p value."""
    if params.greedy:
        return None
    return candidate_count(params, vocab_size), params.top_p < 1


def draw_noise(noise: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Fill noise [B, k] with Exp(1) draws in place (kept outside captured graphs so any generator works)."""
    return noise.exponential_(generator=generator)


def sample(
    logits: torch.Tensor,
    params: SamplingParams,
    noise: torch.Tensor | None,
    *,
    temperature: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
) -> torch.Tensor:
    """One token id per row of logits [B, V] without a host synchronisation; noise [B, k] from draw_noise.

    temperature and top_p: optional device tensors standing in for params' values (see filtered_probabilities).
    """
    if params.greedy:
        return logits.argmax(-1)
    probs, ids = filtered_probabilities(logits, params, temperature=temperature, top_p=top_p)
    # Exponential race: argmax(p / E) with E ~ Exp(1) draws from p with no host-side decision.
    choice = (probs / noise).argmax(-1, keepdim=True)
    return ids.gather(-1, choice).squeeze(-1)
