"""Attention math shared by both model families.

Shape legend: B batch, H heads, T query (target) length, S key (source) length, Dh head dim.

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
