"""Teacher forcing and the loss, shared by every model family.

This file is copied next to the weights by ``save_pretrained``: it imports only torch.
"""

from __future__ import annotations

import torch
from torch import nn


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing: the decoder input at step t is the gold token y_{t-1}, with y_0 = the start token.

    :param labels: (B, T) target ids, -100 where ignored
    :return: (B, T) decoder input ids
    """
    shifted = labels.new_full(labels.shape, decoder_start_token_id)  # (B, T)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_token_id)


def seq2seq_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
) -> torch.Tensor:
    """Token-level cross-entropy that ignores -100.

    With ``num_items_in_batch`` (passed by Trainer) the summed loss is divided by the token count of the whole
    accumulated batch, so gradient accumulation gives the same gradient as one large batch.

    :param logits: (B, T, V)
    :param labels: (B, T)
    """
    flat_logits = logits.reshape(-1, logits.size(-1)).float()  # (B*T, V)
    if num_items_in_batch is None:
        return nn.functional.cross_entropy(flat_logits, labels.reshape(-1), ignore_index=-100)
    loss = nn.functional.cross_entropy(flat_logits, labels.reshape(-1), ignore_index=-100, reduction="sum")
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch
