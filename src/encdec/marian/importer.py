"""``encdec import``: a Marian checkpoint (a ``MarianMTModel`` folder or Hub id, such as the OPUS-MT models of
Tiedemann & Thottingal 2020) written as an encdec Transformer folder: the weights unchanged, the tokenizer as one fast
``tokenizers`` tokenizer, the generation defaults carried over and a model card naming the source.

Everything is checked before anything is written: the config (``convert.check_marian_config``), the vocabulary
against the embeddings, every tensor's name and shape, the weights file itself; the folder is then written beside
``--output`` and renamed onto it, so a failed import leaves nothing there. After writing, the new model's logits are
compared with transformers' own ``MarianMTModel`` on the source checkpoint (``ImportReport.max_logit_difference``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig

from ..cards import write_model_card
from ..errors import InputFileError
from ..folders import read_json, save_for_pipeline
from ..io_utils import refuse_existing, replace_folder
from ..models.modeling_transformer_seq2seq import TransformerSeq2SeqForConditionalGeneration
from .convert import marian_config_to_encdec, marian_state_dict_to_encdec
from .tokenizer import build_marian_tokenizer

HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
# what a MarianMTModel folder on the Hub holds that the import reads (not tf_model.h5, rust_model.ot, ...)
HUB_FILES = ["config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
             "model-*.safetensors", "pytorch_model.bin", "source.spm", "target.spm", "vocab.json", "target_vocab.json",
             "tokenizer_config.json", "README.md"]
CHECK_TEXTS = ("Hello, world.", "A man in an orange hat starring at something.", "Zwei Hunde spielen im Schnee.",
               "1.5 km, 20 % — «OK»?")


@dataclass
class ImportReport:
    """What ``import_marian`` wrote and measured."""

    output: Path
    source: str
    parameters: int
    missing_pieces: int  # SentencePiece pieces that vocab.json lacks: MarianTokenizer maps them to <unk>, so do we
    max_logit_difference: float  # against MarianMTModel on CHECK_TEXTS (0.0: the same floats)


def resolve_source(source: str) -> Path:
    """The local folder of ``source``: itself when it is a folder, else the Hub snapshot of the model id (only the
    files the import reads). A name that is neither, or a Hub that cannot be reached, is one line."""
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists() or not HUB_ID.fullmatch(source):
        raise InputFileError(f"--from {source}: no such model folder, and not a Hub model id (owner/name, e.g. "
                             "Helsinki-NLP/opus-mt-de-en); give a MarianMTModel folder or a Hub id.")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(source, allow_patterns=HUB_FILES))
    except Exception as error:  # offline, unknown id, gated, network: all end the same way for the user
        raise InputFileError(f"--from {source}: the Hugging Face Hub could not give this model "
                             f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); check "
                             "the id and the network, or download the folder and pass its path.") from None


def read_marian_weights(folder: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """The tensors of a Marian folder (safetensors, sharded or not, else ``pytorch_model.bin`` read with
    ``weights_only=True``) and the file they came from; a damaged or truncated file is named."""
    from safetensors.torch import load_file

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(read_json(index, "the weights index").get("weight_map", {}).values()))
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state |= _read_weights(folder / shard, load_file)
        return state, index
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return _read_weights(folder / name, load_file), folder / name
    raise InputFileError(f"{folder} has no weights (model.safetensors or pytorch_model.bin); a MarianMTModel folder "
                         "holds one of them next to config.json.")


def _read_weights(path: Path, load_file: Any) -> dict[str, torch.Tensor]:
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # safetensors, zip and pickle errors differ; each means the same to the user
        raise InputFileError(f"{path} cannot be read ({type(error).__name__}: {str(error)[:160]}); it is truncated "
                             "or damaged: download it again.") from None
    if not isinstance(state, dict) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise InputFileError(f"{path} is not a state dict of tensors; it is not a MarianMTModel checkpoint.")
    return state


def marian_generation_config(folder: Path, marian: dict[str, Any]) -> tuple[GenerationConfig, int | None]:
    """Marian's decoding defaults (``generation_config.json``, else the ones old ``config.json`` files hold):
    ``bad_words_ids`` (the pad token is never generated), beams, ``forced_eos_token_id``, the start token; and its
    ``max_length`` (start token included) less one: the budget of new tokens encdec saves instead, the same stop."""
    path = folder / "generation_config.json"
    values = read_json(path, "the generation config") if path.is_file() else {
        key: value for key, value in marian.items() if key in GenerationConfig().to_dict()}
    values = {key: value for key, value in values.items() if not key.startswith("_") and key != "transformers_version"}
    max_length = values.pop("max_length", None)
    config = GenerationConfig(**values)
    for key in ("decoder_start_token_id", "eos_token_id", "pad_token_id"):
        if getattr(config, key, None) is None and marian.get(key) is not None:
            setattr(config, key, marian[key])
    config.bos_token_id = None
    return config, int(max_length) - 1 if max_length else None


def card_source(folder: Path, source: str) -> tuple[dict[str, Any], list[str]]:
    """The card's ``imported_from`` (the source's name and license, read from its own card) and languages."""
    from huggingface_hub import ModelCard

    license_ = None
    languages: list[str] = []
    if (folder / "README.md").is_file():
        try:
            data = ModelCard.load(folder / "README.md").data
            license_ = data.license
            languages = [data.language] if isinstance(data.language, str) else list(data.language or [])
        except Exception:  # a card without metadata is still a card: the model imports without its license
            license_ = None
    tokenizer_config = folder / "tokenizer_config.json"
    pair = read_json(tokenizer_config, "the tokenizer config") if tokenizer_config.is_file() else {}
    if pair.get("source_lang") and pair.get("target_lang"):
        languages = [str(pair["source_lang"]), str(pair["target_lang"])]
    return {"model": source, "license": license_}, languages


def import_marian(source: str, output: str | os.PathLike, overwrite: bool = False) -> ImportReport:
    """Import the Marian model ``source`` (folder or Hub id) into the new encdec folder ``output``."""
    output = refuse_existing(output, overwrite, "output folder", folder=True)
    folder = resolve_source(source)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise InputFileError(f"{folder} has no config.json: it is not a model folder; give a MarianMTModel folder "
                             "(config.json, model.safetensors or pytorch_model.bin, source.spm, target.spm, "
                             "vocab.json).")
    marian = read_json(config_path, "the model config")
    config = marian_config_to_encdec(marian, name=str(config_path))
    tokenizer, missing_pieces = build_marian_tokenizer(folder)
    if len(tokenizer) != config.vocab_size:
        raise InputFileError(f"{folder / 'vocab.json'} holds {len(tokenizer)} tokens, but config.json's embeddings "
                             f"have {config.vocab_size} rows; the vocabulary and the weights are of different "
                             "models.")
    state, weights_path = read_marian_weights(folder)
    weights = marian_state_dict_to_encdec(state, config, name=str(weights_path))
    model = TransformerSeq2SeqForConditionalGeneration(config)
    model.load_state_dict(weights, strict=True)
    model.generation_config, budget = marian_generation_config(folder, marian)
    if budget:
        model.set_default_budget(budget)
    model.eval()
    imported_from, languages = card_source(folder, source)

    def save(staging: Path) -> None:
        save_for_pipeline(model, tokenizer, staging)
        write_model_card(staging, imported_from=imported_from, languages=languages or None,
                         license=imported_from["license"] or "other", model_name=output.resolve().name)

    replace_folder(save, output)
    difference = compare_with_marian(folder, model, tokenizer)
    return ImportReport(output=Path(output), source=source, parameters=model.num_parameters(),
                        missing_pieces=missing_pieces, max_logit_difference=difference)


@torch.no_grad()
def compare_with_marian(folder: Path, model: torch.nn.Module, tokenizer: Any) -> float:
    """The largest |logit difference| between the imported model and transformers' ``MarianMTModel`` of ``folder``
    on ``CHECK_TEXTS`` (teacher-forced on the source ids themselves, padded as a batch): 0.0 when exact."""
    from transformers import MarianMTModel

    marian = MarianMTModel.from_pretrained(folder).eval()
    batch = tokenizer(list(CHECK_TEXTS), return_tensors="pt", padding=True)
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(batch["input_ids"])
    ours = model(**batch, decoder_input_ids=decoder_input_ids).logits
    theirs = marian(**batch, decoder_input_ids=decoder_input_ids).logits
    return float((ours - theirs).abs().max())


def describe(report: ImportReport) -> str:
    """The report as the command prints it."""
    lines = {"imported": f"{report.source} -> {report.output} ({report.parameters:,} parameters)",
             "logits vs MarianMTModel": f"max |difference| {report.max_logit_difference:.3g} on "
                                        f"{len(CHECK_TEXTS)} sentences",
             "pieces missing from vocab.json": f"{report.missing_pieces} (encoded as <unk>, as MarianTokenizer does)"}
    return json.dumps(lines, indent=2, ensure_ascii=False)


__all__ = ["ImportReport", "compare_with_marian", "import_marian", "marian_generation_config", "read_marian_weights",
           "resolve_source"]
