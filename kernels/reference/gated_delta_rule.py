"""The gated delta rule of Gated DeltaNet in plain PyTorch: chunked (UT transform) and token-recurrent forms."""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK = 64


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def gates(
    a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-decay g = -exp(A_log) * softplus(a + dt_bias) and write strength beta = sigmoid(b), in fp32."""
    g = -A_log.float().exp() * F.softplus(a.float() + dt_bias.float())
    return g, b.float().sigmoid()


def prepare(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """Normalised, scaled, head-repeated fp32 inputs laid out [B, H, T, ...]: (q, k, v, g, beta)."""
    key_dim = q.shape[-1]
    repeat = v.shape[2] // q.shape[2]
    qf = l2_normalize(q.float()) * key_dim**-0.5
    kf = l2_normalize(k.float())
    if repeat > 1:
        qf = qf.repeat_interleave(repeat, dim=2)
        kf = kf.repeat_interleave(repeat, dim=2)
    g, beta = gates(a, b, A_log, dt_bias)
    return tuple(t.transpose(1, 2).contiguous() for t in (qf, kf, v.float(), g, beta))


def recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-by-token recurrence on prepared [B, H, T, ...] inputs; returns (o [B, H, T, dv], final state)."""
    outputs = []
    for t in range(q.shape[2]):
        state = state * g[:, :, t, None, None].exp()
        predicted = torch.einsum("bhkv,bhk->bhv", state, k[:, :, t])
        delta = beta[:, :, t, None] * (v[:, :, t] - predicted)
        state = state + k[:, :, t, :, None] * delta[:, :, None, :]
        outputs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, :, t]))
    return torch.stack(outputs, dim=2), state


def chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    chunk: int = CHUNK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked form on prepared [B, H, T, ...] inputs: intra-chunk work as matmuls, a scan over chunks only."""
    batch, heads, length, _ = q.shape
    pad = (-length) % chunk
    # Padded positions get beta = 0 and g = 0: they neither write to the state nor decay it.
    q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    g, beta = (F.pad(t, (0, pad)) for t in (g, beta))
    n_chunks = (length + pad) // chunk
    q, k, v = (t.reshape(batch, heads, n_chunks, chunk, -1) for t in (q, k, v))
    g, beta = (t.reshape(batch, heads, n_chunks, chunk) for t in (g, beta))

    g_cum = g.cumsum(-1)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    decay = (g_cum[..., :, None] - g_cum[..., None, :]).masked_fill(~causal, float("-inf")).exp()
    k_beta = k * beta[..., None]
    # UT transform: (I + strictly_lower(beta_i k_i.k_j decay_ij)) X = rhs folds the chunk's delta updates.
    system = (k_beta @ k.transpose(-1, -2)) * decay
    new_values = torch.linalg.solve_triangular(system, v * beta[..., None], upper=False, unitriangular=True)
    decayed_keys = torch.linalg.solve_triangular(
        system, k_beta * g_cum.exp()[..., None], upper=False, unitriangular=True
    )
    intra = (q @ k.transpose(-1, -2)) * decay
    q_decayed = q * g_cum.exp()[..., None]
    k_to_end = k * (g_cum[..., -1:] - g_cum).exp()[..., None]
    chunk_decay = g_cum[..., -1].exp()[..., None, None]

    state = state.float()
    out = torch.empty_like(new_values)
    for c in range(n_chunks):
        v_new = new_values[:, :, c] - decayed_keys[:, :, c] @ state
        out[:, :, c] = q_decayed[:, :, c] @ state + intra[:, :, c] @ v_new
        state = state * chunk_decay[:, :, c] + k_to_end[:, :, c].transpose(-1, -2) @ v_new
    return out.reshape(batch, heads, n_chunks * chunk, -1)[:, :, :length], state


def gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    state: torch.Tensor,
    trail: torch.Tensor | None = None,
) -> torch.Tensor:
    """Gated DeltaNet core; `state` [B, Hv, dk, dv] fp32 is updated in place; returns o [B, T, Hv, dv] in v.dtype.

    trail [B, T, Hv, dk, dv] fp32, when given, receives the state after each token: the tokens then run one
    decode step each, so every kept state is bit for bit the one plain decoding would reach.
    """
    if trail is not None:
        outputs = []
        for t in range(q.shape[1]):
            token = slice(t, t + 1)
            outputs.append(
                _step(q[:, token], k[:, token], v[:, token], a[:, token], b[:, token], A_log, dt_bias, state)
            )
            trail[:, t].copy_(state)
        return torch.cat(outputs, dim=1)
    if q.shape[1] == 1:
        return _step(q, k, v, a, b, A_log, dt_bias, state)
    qp, kp, vp, g, beta = prepare(q, k, v, a, b, A_log, dt_bias)
    out, final = chunked(qp, kp, vp, g, beta, state)
    state.copy_(final)
    return out.transpose(1, 2).to(v.dtype).contiguous()


def _step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    state: torch.Tensor,
) -> torch.Tensor:
    """One token of `recurrent` read straight from the [B, 1, H, ...] inputs: no layout copies, state in place.

    Value heads sharing a key head are a view [B, Hk, Hv/Hk, ...] of the state, so q and k are broadcast
    instead of repeated.
    """
    batch, _, key_heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2], v.shape[3]
    groups = (key_heads, value_heads // key_heads)
    # q and k are normalised as one tensor: half the small ops, whose overhead dominates at this size.
    qf, kf = (
        t.view(batch, key_heads, 1, 1, key_dim)
        for t in l2_normalize(torch.cat((q, k), dim=2).float()).chunk(2, dim=2)
    )
    qf.mul_(key_dim**-0.5)
    g, beta = gates(a, b, A_log, dt_bias)  # [B, 1, Hv]
    grouped = state.unflatten(1, groups)  # [B, Hk, Hv/Hk, dk, dv]
    grouped.mul_(g.exp_().reshape(batch, *groups, 1, 1))
    predicted = kf @ grouped  # [B, Hk, Hv/Hk, 1, dv]
    delta = (
        v.float()
        .reshape(batch, *groups, 1, value_dim)
        .sub(predicted)
        .mul_(beta.reshape(batch, *groups, 1, 1))
    )
    grouped.addcmul_(kf.transpose(-1, -2), delta)
    return (qf @ grouped).view(batch, 1, value_heads, value_dim).to(v.dtype)
