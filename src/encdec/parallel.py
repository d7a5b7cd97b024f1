"""Several processes: what ``encdec train`` needs beyond Accelerate.

``encdec train`` needs nothing special to run in several processes: Seq2SeqTrainer (Accelerate underneath) wraps
the model in DDP, gives each process its share of every batch and gathers the generated predictions for BLEU,
and ``encdec.training`` lets only the main process write files. Launch it with Accelerate or torchrun::

    accelerate launch --config_file configs/accelerate/cpu-2proc.yaml -m encdec train configs/demo-transformer.yaml
    torchrun --nproc_per_node 2 -m encdec train configs/demo-transformer.yaml

What this module adds (``encdec.processes`` answers "am I the main process?" and tells Accelerate to join processes
on the CPU, gloo, under a launcher on a machine without a GPU):

- ``unsharded_copy``: an FSDP run's gathered weights as an ordinary model, which ``encdec train`` saves as the model
  folder. FSDP on CPU processes (which Trainer does not turn on) is tested with the helpers in ``tests/cpu_fsdp.py``.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from transformers import PreTrainedModel


def unsharded_copy(model: nn.Module, state_dict: dict[str, torch.Tensor]) -> PreTrainedModel:
    """An ordinary (unwrapped, unsharded) copy of ``model`` holding the full ``state_dict``: what to save after FSDP.
    ``model`` may be an FSDP2 module or the model inside an FSDP1 wrapper."""
    cls = next(c for c in type(model).__mro__ if issubclass(c, PreTrainedModel) and not issubclass(c, FSDPModule))
    plain = cls(copy.deepcopy(model.config))
    missing, unexpected = plain.load_state_dict(state_dict, strict=False)
    tied = set(getattr(plain, "all_tied_weights_keys", None) or getattr(plain, "_tied_weights_keys", None) or {})
    if unexpected or set(missing) - tied:
        raise RuntimeError(f"The gathered state dict does not fit {cls.__name__}: missing {sorted(missing)}, "
                           f"unexpected {sorted(unexpected)}.")
    plain.tie_weights()
    if getattr(model, "generation_config", None) is not None:
        plain.generation_config = copy.deepcopy(model.generation_config)
    return plain.eval()


__all__ = ["unsharded_copy"]
