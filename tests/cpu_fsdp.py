"""FSDP on CPU processes, for the tests: ``tests/distributed_worker.py`` trains with these under a launcher.

Accelerate (and so Trainer) turn FSDP on only for GPU-type devices: on CPU processes Trainer silently falls back to
DDP. ``shard_model`` applies torch's FSDP2 ``fully_shard`` directly, one unit per ``_no_split_modules`` class
(Transformer: each encoder and decoder layer), except that a unit never holds a tied parameter (the RNN's encoder and
decoder both hold the shared embedding: their other children become the units). ``wrap_fsdp1`` wraps with FSDP1 and
the auto-wrap policy Accelerate's plugin builds. ``save_full_model`` gathers the full state dict on rank 0 and writes
an ordinary model folder through ``encdec.parallel.unsharded_copy``, the part the product runs (``encdec train``
saving an FSDP run on GPUs).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
from transformers import PreTrainedModel

from encdec.parallel import unsharded_copy


def _shared_with_outside(module: nn.Module, model: nn.Module) -> bool:
    """Whether a parameter of ``module`` is also held by a module outside it (a tied weight)."""
    inside = {id(p) for p in module.parameters()}
    submodules = {id(m) for m in module.modules()}
    for other in model.modules():
        if id(other) in submodules:
            continue
        if any(id(p) in inside for p in other.parameters(recurse=False)):
            return True
    return False


def fsdp_units(model: PreTrainedModel) -> list[nn.Module]:
    """The modules to shard one by one (they never nest): every module whose class is in ``_no_split_modules``,
    except that a module holding a tied parameter is replaced by those of its children that hold none (recursively);
    what is left (embeddings, LM head) belongs to the root unit. Two units never share a parameter, which FSDP
    requires."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    units: list[nn.Module] = []

    def visit(module: nn.Module, candidate: bool) -> None:
        if candidate and any(True for _ in module.parameters()):
            if not _shared_with_outside(module, model):
                units.append(module)
                return
            for child in module.children():  # split a unit that holds a tied weight into its children
                visit(child, True)
            return
        for child in module.children():
            visit(child, type(child).__name__ in names)

    visit(model, False)
    return units


def wrap_fsdp1(model: PreTrainedModel) -> nn.Module:
    """FSDP1 with the auto-wrap policy that Accelerate's FSDP plugin builds from ``_no_split_modules``
    (``TRANSFORMER_BASED_WRAP``, full shard, ``use_orig_params``), on the CPU: the check, without a GPU, that both
    families wrap and train the way ``configs/accelerate/multi-gpu-fsdp.yaml`` will wrap them."""
    names = set(model._no_split_modules)
    classes = {type(module) for module in model.modules() if type(module).__name__ in names}
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=classes)
    return FullyShardedDataParallel(model, auto_wrap_policy=policy, use_orig_params=True,
                                    device_id=torch.device("cpu"))


def shard_model(model: PreTrainedModel) -> PreTrainedModel:
    """Apply FSDP2 ``fully_shard`` (full shard) to each of ``fsdp_units(model)``, then to the model (the root unit).
    Works on CPU processes with gloo; the model keeps its class (with an FSDP mix-in) and its methods."""
    for unit in fsdp_units(model):  # every unit's parameters are used inside its own forward only
        fully_shard(unit)
    fully_shard(model)
    return model


def save_full_model(model: PreTrainedModel, folder: str | os.PathLike, tokenizer=None) -> Path | None:
    """Gather the full state dict of a sharded model on rank 0 and save an ordinary folder there (``save_pretrained``,
    and the tokenizer when given), which loads in one process. Every process must call it; returns the folder on
    rank 0, None elsewhere."""
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    folder = Path(folder)
    if dist.get_rank() == 0:
        plain = unsharded_copy(model, state)
        plain.save_pretrained(folder)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
    dist.barrier()
    return folder if dist.get_rank() == 0 else None
