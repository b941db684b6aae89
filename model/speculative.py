"""Exact speculative decoding: which drafted tokens a verify pass accepts, so that every emitted token is the one
decoding without speculation emits, greedy or sampled.

A verify pass feeds each row its pending token and its draft d_1..d_k; the logits at position i are the
model's distribution for the token after d_i (after the pending token at i = 0). At each position the target
token is drawn as plain decoding draws it: the argmax when greedy, else the exponential race argmax(p / E)
over the processed distribution p (temperature, top-k, top-p) with the noise E that plain decoding would use
for that token. The pass emits the longest prefix of the draft equal to the targets, then the next target.

For sampling this is the rule for a deterministic draft (Leviathan et al. 2023, q one-hot): d_i is accepted
with probability p_i(d_i), and when rejected the emitted token is distributed as p_i without d_i,
renormalised. Coupling it to plain decoding's noise makes it stronger: a seeded generation emits the very
tokens it emits without speculation, however the drafts fall and however the generation is split into calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.sampling import sample
from model.sampling_params import SamplingParams


@dataclass
class SpeculationStats:
    """What a session's speculative decoding did: verify passes, one-token steps (no draft), tokens drafted
    and tokens accepted."""

    verify_passes: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0

    @property
    def accepted_per_pass(self) -> float:
        """Drafted tokens accepted per verify pass."""
        return self.accepted / self.verify_passes if self.verify_passes else 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "verify_passes": self.verify_passes,
            "one_token_steps": self.steps,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "accepted_per_pass": round(self.accepted_per_pass, 3),
            "acceptance_rate": round(self.accepted / self.drafted, 3) if self.drafted else 0.0,
        }


class NoiseStream:
    """The sampling noise of plain decoding, one [B, k] block per generated token (block g for every row's
    g-th token of a generate() call), drawn in order as a verify pass first needs it; rewind() hands the blocks
    drawn past the call's last token back to the generator, as plain decoding never draws them."""

    def __init__(self, generator: torch.Generator, batch: int, candidates: int, device: torch.device) -> None:
        self.generator = generator
        self.shape = (batch, candidates)
        self.device = device
        self.blocks: list[torch.Tensor] = []
        self._states: list[torch.Tensor] = []  # the generator's state before each block

    def block(self, index: int) -> torch.Tensor:
        while len(self.blocks) <= index:
            self._states.append(self.generator.get_state())
            noise = torch.empty(self.shape, device=self.device)
            self.blocks.append(noise.exponential_(generator=self.generator))
        return self.blocks[index]

    def rewind(self, used: int) -> None:
        """Keep the first `used` blocks drawn; the generator continues where plain decoding would."""
        if used < len(self.blocks):
            self.generator.set_state(self._states[used])


def targets(
    logits: torch.Tensor,
    rows: list[int],
    generated: list[int],
    sampling: SamplingParams,
    noise: NoiseStream | None,
    temperature: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
) -> list[list[int]]:
    """The token plain decoding would emit after each position of logits [R, T, V]: row i is session row rows[i],
    whose position t predicts its generated[i] + t-th token of the call (noise None when greedy)."""
    count, width, vocab = logits.shape
    race = None
    if not sampling.greedy:
        race = torch.stack(
            [noise.block(generated[i] + t)[row] for i, row in enumerate(rows) for t in range(width)]
        )
    flat = sample(logits.reshape(count * width, vocab), sampling, race, temperature=temperature, top_p=top_p)
    return flat.view(count, width).tolist()


def agreed(draft: list[int], targets: list[int]) -> list[int]:
    """The longest prefix of draft equal to targets, then the next target."""
    n = 0
    while n < len(draft) and draft[n] == targets[n]:
        n += 1
    return draft[:n] + [targets[n]]


def cut(tokens: list[int], stop_ids: set[int], left: int) -> list[int]:
    """tokens up to and including the first stop id, and at most `left` of them."""
    for i, token in enumerate(tokens[:left]):
        if token in stop_ids:
            return tokens[: i + 1]
    return tokens[:left]
