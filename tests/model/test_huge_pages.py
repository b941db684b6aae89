"""The CPU weights moved into one huge-page-advised block: the same values, one block, aligned starts, a tied head
and embedding still one weight, and the advice given on a huge-page boundary."""

from __future__ import annotations

import torch

from model import huge_pages
from model.cpu_weights import CpuWeight, to_cpu_weight


def _weights() -> dict[str, object]:
    generator = torch.Generator().manual_seed(3)
    head = to_cpu_weight(torch.randn(37, 48, generator=generator), "bfloat16")
    return {
        "lm_head.weight": head,
        "embed_tokens.weight": head,
        "layers.0.mlp.down_proj.weight": to_cpu_weight(torch.randn(5, 600, generator=generator), "int8"),
        "layers.0.mlp.up_proj.weight": to_cpu_weight(torch.randn(9, 512, generator=generator), "int4"),
        "norm.weight": torch.randn(48, generator=generator),
    }


def test_weights_keep_their_values_in_one_aligned_block(monkeypatch):
    advised = []
    monkeypatch.setattr(huge_pages, "_advise_huge_pages", advised.append)
    weights = _weights()
    before = {name: w.dequantize().clone() for name, w in weights.items() if isinstance(w, CpuWeight)}
    norm = weights["norm.weight"]
    moved = huge_pages.into_huge_pages(weights)
    assert moved["norm.weight"] is norm  # plain tensors stay as they are
    assert moved["lm_head.weight"] is moved["embed_tokens.weight"]
    (block,) = advised
    assert block.data_ptr() % huge_pages.HUGE_PAGE == 0
    matrices = {id(w): w for w in moved.values() if isinstance(w, CpuWeight)}.values()
    parts = [t for w in matrices for t in (w.tiles, w.scales) if t is not None]
    assert len(parts) == 4  # the tied head once, int8's values and scales, int4's rows
    for tensor in parts:
        assert tensor.untyped_storage().data_ptr() == block.untyped_storage().data_ptr()
        assert tensor.data_ptr() % huge_pages.ALIGNMENT == 0
    for name, dense in before.items():
        assert torch.equal(moved[name].dequantize(), dense), name


def test_a_model_without_cpu_weights_is_left_alone(monkeypatch):
    advised = []
    monkeypatch.setattr(huge_pages, "_advise_huge_pages", advised.append)
    weights = {"norm.weight": torch.ones(4)}
    assert huge_pages.into_huge_pages(weights) == weights
    assert not advised


def test_the_advice_on_this_machine_is_taken_or_harmlessly_refused():
    block = torch.zeros(3 * huge_pages.HUGE_PAGE, dtype=torch.uint8)
    offset = -block.data_ptr() % huge_pages.HUGE_PAGE
    huge_pages._advise_huge_pages(block[offset:])
    block[offset:] = 7
    assert int(block[offset:].sum()) == 7 * (block.numel() - offset)
