"""Attention math shared by both model families.

Shape legend: B batch, H heads, T query (target) length, S key (source) length, Dh head dim,
A width of the additive-attention layer.

This file is copied next to the weights by ``save_pretrained``: it imports only torch.
"""

from __future__ import annotations

import torch
from torch import nn


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention (Vaswani et al. 2017, Eq. 1), written out so the math is visible.

    ``Attention(Q, K, V) = softmax(Q Kᵀ / sqrt(d_k) + M) V``

    It has the signature of transformers' attention interface, so it is the ``"eager"`` entry beside SDPA,
    flash and flex. ``attention_mask`` is either additive (0 keep, very negative drop) or boolean (True keep);
    ``None`` with a causal module means "causal, no padding", as SDPA's ``is_causal``.

    :param query: (B, H, T, Dh)
    :param key: (B, H, S, Dh)
    :param value: (B, H, S, Dh)
    :return: the context (B, T, H, Dh) and the attention weights (B, H, T, S)
    """
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling  # (B, H, T, S)
    q_len, kv_len = scores.shape[-2:]
    is_causal = getattr(module, "is_causal", False) if is_causal is None else is_causal
    if attention_mask is None and is_causal and q_len > 1:
        # query i sits at absolute position (S - T + i) and may see keys 0..S-T+i
        attention_mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=scores.device).tril(kv_len - q_len)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)  # (B, H, T, S)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    context = torch.matmul(weights, value)  # (B, H, T, Dh)
    return context.transpose(1, 2).contiguous(), weights  # (B, T, H, Dh)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Alignment weights over source positions: ``alpha_ti = exp(e_ti) / sum_{k: mask_k} exp(e_tk)`` (Bahdanau et al.
    2015, Eq. 6; Luong et al. 2015, Eq. 7), computed in float32.

    Masked positions get weight exactly 0, and every row with at least one kept position sums to 1.

    :param scores: (B, T, S) energies e_ti
    :param mask: (B, S) boolean, True = real source token, or None for no padding
    :return: (B, T, S) weights alpha_ti
    """
    if mask is None:
        return torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
    keep = mask[:, None, :].bool()  # (B, 1, S)
    energies = scores.float().masked_fill(~keep, torch.finfo(torch.float32).min)
    weights = torch.softmax(energies, dim=-1).masked_fill(~keep, 0.0)  # (B, T, S); exactly 0 on padding
    return weights.to(scores.dtype)


def additive_attention_scores(query: torch.Tensor, keys: torch.Tensor, v_a: nn.Linear) -> torch.Tensor:
    """Additive (concat) energies: ``e_ti = v_aᵀ tanh(W_q q_t + W_k h_i)`` (Bahdanau et al. 2015, Appendix A.1.2;
    Luong et al. 2015, Eq. 8 "concat", where ``W_a [s_t; h_i] = W_q s_t + W_k h_i``).

    Both projections are done by the caller, so ``W_k h_i`` is computed once per source sentence.

    :param query: (B, T, A) projected queries W_q q_t
    :param keys: (B, S, A) projected keys W_k h_i
    :param v_a: the (A -> 1) projection v_a
    :return: (B, T, S) energies
    """
    hidden = torch.tanh(query[:, :, None, :] + keys[:, None, :, :])  # (B, T, S, A)
    return v_a(hidden).squeeze(-1)  # (B, T, S)
