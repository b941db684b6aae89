"""The Qwen3.5 language model's forward pass (hybrid Gated DeltaNet / gated attention), every op via `kernels`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

import kernels
from model.cache import ModelCache, StateTrail
from model.config import Qwen35Config
from model.linear import Weight, embedding, linear


@dataclass(frozen=True)
class WeightLayout:
    """A model tensor and the checkpoint tensors (name, shape) stacked along its first dim to form it."""

    shape: tuple[int, ...]
    sources: tuple[tuple[str, tuple[int, ...]], ...]
    dtype: torch.dtype | None = None  # None: the model dtype


def _entry(
    name: str, *sources: tuple[str, tuple[int, ...]], dtype: torch.dtype | None = None
) -> WeightLayout:
    """The model tensor `name` stacked from its checkpoint tensors (name, shape)."""
    rows = sum(shape[0] for _, shape in sources)
    # Depthwise conv weights are stored [C, 1, K]; the conv kernel takes them as [C, K].
    trailing = sources[0][1][2:] if name.endswith("conv1d.weight") else sources[0][1][1:]
    return WeightLayout((rows, *trailing), tuple(sources), dtype)


def _one(name: str, shape: tuple[int, ...], dtype: torch.dtype | None = None) -> tuple[str, WeightLayout]:
    return name, _entry(name, (name, shape), dtype=dtype)


def decoder_layer_layout(config: Qwen35Config, p: str, layer_type: str) -> dict[str, WeightLayout]:
    """The tensors of one decoder layer whose names start with p: the trunk's layers and the draft head's."""
    c = config
    hidden = c.hidden_size
    layout = dict(
        [
            _one(p + "input_layernorm.weight", (hidden,)),
            _one(p + "post_attention_layernorm.weight", (hidden,)),
            _one(p + "mlp.down_proj.weight", (hidden, c.intermediate_size)),
        ]
    )
    layout[p + "mlp.gate_up_proj.weight"] = _entry(
        p + "mlp.gate_up_proj.weight",
        (p + "mlp.gate_proj.weight", (c.intermediate_size, hidden)),
        (p + "mlp.up_proj.weight", (c.intermediate_size, hidden)),
    )
    if layer_type == "full_attention":
        a = p + "self_attn."
        q_rows = c.num_attention_heads * c.head_dim
        kv_rows = c.num_key_value_heads * c.head_dim
        layout[a + "qkv_proj.weight"] = _entry(
            a + "qkv_proj.weight",
            (a + "q_proj.weight", (2 * q_rows, hidden)),
            (a + "k_proj.weight", (kv_rows, hidden)),
            (a + "v_proj.weight", (kv_rows, hidden)),
        )
        layout.update(
            [
                _one(a + "o_proj.weight", (hidden, q_rows)),
                _one(a + "q_norm.weight", (c.head_dim,)),
                _one(a + "k_norm.weight", (c.head_dim,)),
            ]
        )
        return layout
    g = p + "linear_attn."
    heads = c.linear_num_value_heads
    layout[g + "in_proj.weight"] = _entry(
        g + "in_proj.weight",
        (g + "in_proj_qkv.weight", (c.conv_dim, hidden)),
        (g + "in_proj_z.weight", (c.linear_value_dim, hidden)),
        (g + "in_proj_b.weight", (heads, hidden)),
        (g + "in_proj_a.weight", (heads, hidden)),
    )
    layout.update(
        [
            _one(g + "conv1d.weight", (c.conv_dim, 1, c.linear_conv_kernel_dim)),
            _one(g + "A_log", (heads,), dtype=torch.float32),
            _one(g + "dt_bias", (heads,), dtype=torch.float32),
            _one(g + "norm.weight", (c.linear_value_head_dim,)),
            _one(g + "out_proj.weight", (hidden, c.linear_value_dim)),
        ]
    )
    return layout


def norm_layout(*names: str, config: Qwen35Config) -> dict[str, WeightLayout]:
    """Norm weights of the hidden size, by name."""
    return dict(_one(name, (config.hidden_size,)) for name in names)


def weight_layout(config: Qwen35Config) -> dict[str, WeightLayout]:
    """The model's tensors by name, each built from its checkpoint tensors (text-layout names sans `model.`).

    Projections that read the same input are stacked into one matrix so each needs a single matmul.
    """
    c = config
    layout = dict([_one("embed_tokens.weight", (c.vocab_size, c.hidden_size))])
    layout.update(norm_layout("norm.weight", config=c))
    if not c.tie_word_embeddings:
        layout.update([_one("lm_head.weight", (c.vocab_size, c.hidden_size))])
    for i, layer_type in enumerate(c.layer_types):
        layout.update(decoder_layer_layout(c, f"layers.{i}.", layer_type))
    return layout


class Qwen35Model:
    """Weights plus the forward pass over a batch of new tokens that extends each row's cached sequence."""

    def __init__(self, config: Qwen35Config, weights: dict[str, Weight]) -> None:
        self.config = config
        self.weights = weights
        # The final norm's weight is in the activations' dtype; the embedding may be stored in another.
        norm = weights["norm.weight"]
        self.device = norm.device
        self.dtype = norm.dtype
        rotary_dim = config.rotary_dim
        exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=self.device) / rotary_dim
        self.inv_freq = 1.0 / (config.rope_theta**exponents)
        self.attention_scale = config.head_dim**-0.5
        # Each layer's place among the cache states of its kind (KV caches or GDN states).
        self._state_index = [config.layer_types[:i].count(kind) for i, kind in enumerate(config.layer_types)]

    def forward(self, tokens: torch.Tensor, start: torch.Tensor, cache: ModelCache) -> torch.Tensor:
        """Run tokens [B, T] placed at positions start[b] + t and update cache; fp32 logits of every position
        [B, T, V]."""
        return self.logits(*self._layers(tokens, start, cache))

    def prefill(
        self,
        tokens: torch.Tensor,
        start: torch.Tensor,
        cache: ModelCache,
        logits_at: torch.Tensor,
        *,
        hidden: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """A chunk of new tokens [B, T] at positions start[b] + t: fp32 logits [B, V] at position logits_at[b] of
        each row (its last real token). hidden: also the final normed hidden states of every position [B, T, H]
        (what the draft head reads)."""
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        return self._output(*self._layers(tokens, start, cache), lambda x: x[rows, logits_at], hidden)

    def decode(
        self,
        tokens: torch.Tensor,
        start: torch.Tensor,
        cache: ModelCache,
        *,
        active: torch.Tensor | None = None,
        hidden: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """One token per row [B, 1] at position start[b]: fp32 logits [B, V]. active [B] bool: rows marked False
        leave their recurrent state unchanged (their KV slot at start[b] is scratch, overwritten by their next
        token). hidden: as prefill."""
        return self._output(*self._layers(tokens, start, cache, active), lambda x: x[:, 0], hidden)

    def verify(
        self,
        tokens: torch.Tensor,
        start: torch.Tensor,
        cache: ModelCache,
        *,
        step_bounds: list[int],
        trail: StateTrail | None = None,
        active: torch.Tensor | None = None,
        logit_rows: torch.Tensor | None = None,
        hidden: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """A verify pass: each row's pending token and draft [B, T], attention run position by position as the
        decode step for it would, position t over the first step_bounds[t] cache positions, so that its rounding
        is the step's. fp32 logits of every position [R, T, V] of the rows logit_rows lists (default all); trail
        (sized for T) receives the GDN states after each token; active and hidden: as decode."""
        x, residual = self._layers(tokens, start, cache, active, trail, step_bounds)
        return self._output(x, residual, lambda x: x if logit_rows is None else x[logit_rows], hidden)

    def _layers(
        self,
        tokens: torch.Tensor,
        start: torch.Tensor,
        cache: ModelCache,
        active: torch.Tensor | None = None,
        trail: StateTrail | None = None,
        step_bounds: list[int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every decoder layer on tokens [B, T] at start[b] + t: (last MLP output, residual stream before it)."""
        positions = start[:, None] + torch.arange(tokens.shape[1], device=tokens.device)
        x = embedding(tokens, self.weights["embed_tokens.weight"], self.dtype)
        residual = None
        for i in range(self.config.num_hidden_layers):
            x, residual = self.layer(i, x, residual, positions, start, cache, active, trail, step_bounds)
        return x, residual

    def _output(
        self,
        x: torch.Tensor,
        residual: torch.Tensor,
        pick: Callable[[torch.Tensor], torch.Tensor],
        hidden: bool,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """fp32 logits of the positions pick selects, and with hidden the normed states of every position."""
        if hidden:
            normed = self.final_norm(x, residual)
            return linear(pick(normed), self.weights["lm_head.weight"]).float(), normed
        return self.logits(pick(x), pick(residual))

    def final_norm(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """The final norm of the last layer's (MLP output, residual stream before it)."""
        normed, _ = kernels.rms_norm(
            x, self.weights["norm.weight"], self.config.rms_norm_eps, residual=residual
        )
        return normed

    def logits(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """fp32 logits of the last layer's (MLP output, residual stream before it)."""
        return linear(self.final_norm(x, residual), self.weights["lm_head.weight"]).float()

    def layer(
        self,
        i: int,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        positions: torch.Tensor,
        start: torch.Tensor,
        cache: ModelCache,
        active: torch.Tensor | None = None,
        trail: StateTrail | None = None,
        step_bounds: list[int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Decoder layer i on its input x and the residual stream before it (None at layer 0, where x is it);
        returns (MLP output, residual stream before it): the stream after the layer is their sum."""
        w = self.weights
        c = self.config
        p = f"layers.{i}."
        if residual is None:
            residual = x
            normed = kernels.rms_norm(x, w[p + "input_layernorm.weight"], c.rms_norm_eps)
        else:
            normed, residual = kernels.rms_norm(
                x, w[p + "input_layernorm.weight"], c.rms_norm_eps, residual=residual
            )
        state = self._state_index[i]
        if c.layer_types[i] == "full_attention":
            x = self.attention(p + "self_attn.", normed, positions, start, cache.kv[state], step_bounds)
        else:
            trails = (None, None) if trail is None else (trail.conv[state], trail.recurrent[state])
            x = self._gated_delta_net(
                p + "linear_attn.", normed, cache.conv[state], cache.recurrent[state], active, *trails
            )
        normed, residual = kernels.rms_norm(
            x, w[p + "post_attention_layernorm.weight"], c.rms_norm_eps, residual=residual
        )
        return self.mlp(p + "mlp.", normed), residual

    def mlp(self, p: str, x: torch.Tensor) -> torch.Tensor:
        """The SwiGLU MLP whose weights are named p + ...: the trunk's layers' and the draft head's."""
        gate, up = linear(x, self.weights[p + "gate_up_proj.weight"]).chunk(2, dim=-1)
        return linear(kernels.swiglu(gate, up), self.weights[p + "down_proj.weight"])

    def attention(
        self,
        p: str,
        x: torch.Tensor,
        positions: torch.Tensor,
        start: torch.Tensor,
        kv: tuple[torch.Tensor, torch.Tensor],
        step_bounds: list[int] | None = None,
    ) -> torch.Tensor:
        """Gated attention (weights named p + ...) of x at positions over the KV cache kv, written in place
        (position by position over step_bounds when given, see verify)."""
        w = self.weights
        c = self.config
        batch, length, _ = x.shape
        k_cache, v_cache = kv
        query, gate = kernels.attention_inputs(
            linear(x, w[p + "qkv_proj.weight"]),
            w[p + "q_norm.weight"],
            w[p + "k_norm.weight"],
            c.rms_norm_eps,
            positions,
            self.inv_freq,
            k_cache,
            v_cache,
        )
        if step_bounds is None:
            out = kernels.attention(query, k_cache, v_cache, gate, start, self.attention_scale)
        else:
            out = kernels.attention_as_steps(
                query, k_cache, v_cache, gate, start, self.attention_scale, step_bounds
            )
        return linear(out.reshape(batch, length, -1), w[p + "o_proj.weight"])

    def _gated_delta_net(
        self,
        p: str,
        x: torch.Tensor,
        conv_state: torch.Tensor,
        recurrent_state: torch.Tensor,
        active: torch.Tensor | None,
        conv_trail: torch.Tensor | None = None,
        recurrent_trail: torch.Tensor | None = None,
    ) -> torch.Tensor:
        w = self.weights
        out = kernels.gated_delta_net(
            linear(x, w[p + "in_proj.weight"]),
            w[p + "conv1d.weight"],
            conv_state,
            w[p + "A_log"],
            w[p + "dt_bias"],
            recurrent_state,
            w[p + "norm.weight"],
            self.config.rms_norm_eps,
            active=active,
            conv_trail=conv_trail,
            recurrent_trail=recurrent_trail,
        )
        return linear(out, w[p + "out_proj.weight"])
