"""``encdec export --format web``: a static site that translates in the browser, with no server round trip and no
CDN: the ONNX export of a model (``encdec.ship.onnx_export``, int8 weights by default) run by ONNX Runtime Web
(https://onnxruntime.ai/docs/tutorials/web/, its WebAssembly backend, single-threaded) in a Web Worker, the
model's tokenizer read by tokenizers.js, and greedy and beam search as ``generate()`` runs them.

The site::

    index.html          a translate page (window.encdec, below)
    encdec.js           the library: ``window.encdec.translate(lines, {source, target, numBeams, maxNewTokens})``
                        -> Promise
    encdec-worker.js    ONNX Runtime Web, the tokenizer and the search, bundled (runs off the page's thread)
    ort-wasm.wasm.gz    ONNX Runtime Web's WebAssembly binary, gzipped (the worker inflates it)
    web-runtime.json    the npm packages it was built from: versions and integrity hashes
    model/              the ONNX export: encoder_model.onnx, decoder_model_merged.onnx, encdec_onnx.json, config,
                        generation config, tokenizer; and encdec_decoding.json, the rules the browser decodes by
                        (``decoding_rules``), so that the JavaScript restates none of them, with a multilingual
                        model's languages (``language_rules``), what the page says about the model (``page_about``)
                        and the bytes a browser downloads (``download_record``)

The JavaScript is built from the npm registry by ``make web`` (``npm ci`` on web/package-lock.json, pinned by
version and integrity hash, then an esbuild bundle) into the package data folder ``web_runtime/``; this module
copies it beside the model. Any static file server serves the site (``python -m http.server``), and so does
``encdec serve --offline-site SITE`` at ``/offline``.

The browser runs the logits processors ``no_repeat_ngram_size``, ``bad_words_ids`` and ``forced_eos_token_id`` (the
last two are an imported Marian model's: its pad token is never generated, ``</s>`` ends a full budget): a generation
config that sets another (``repetition_penalty``, ``min_length``, ...) or samples is refused, since the site would
translate differently from ``encdec translate``.

A multilingual model (docs/multilingual.md) translates every direction in the browser as ``generate()`` does: a source
is ``__SRC__ text </s>`` (its language token first), and the target language's token is forced as the first generated
token (``forced_bos_token_id``), then dropped from the text with the other special tokens.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from importlib import resources
from pathlib import Path

from transformers import GenerationConfig

from ..backends import BACKENDS
from ..cards import card_languages, read_card
from ..data.dates import DATE_LANGUAGES, make_date_pairs, write_date
from ..decoding_options import AUTO_BUDGET, DECODING, declared, resolve
from ..errors import EncdecError
from ..folders import read_json, require_model_folder
from ..io_utils import atomic_write_json, refuse_existing, refuse_overlap, replace_folder
from ..tokenization import load_tokenizer, tokenizer_languages
from .onnx_export import export_onnx

RUNTIME = "web_runtime"  # package data: what `make web` builds
WASM = "ort-wasm.wasm.gz"  # ONNX Runtime Web's WebAssembly binary, gzipped
RUNTIME_FILES = ("index.html", "encdec.js", "encdec-worker.js", WASM, "web-runtime.json")
MODEL_FOLDER = "model"
DECODING_RULES = "encdec_decoding.json"  # in the model folder: what the browser decodes by (``decoding_rules``)
MAX_BEAMS = 16  # the widest beam the page and window.encdec.translate accept (one source at a time, in WebAssembly)
QUANTIZE = BACKENDS["web"].export_quantize  # int8 (the default), float32
# a multilingual model's source, as its tokenizer builds one (NLLB's non-legacy convention): `__SRC__ text </s>`
SOURCE_TEMPLATE = ("source_language", "text", "eos")
# the generation settings beyond greedy and beam search (logits processors, sampling, group beam search), each with
# the values that leave decoding as it is: unset (None, as a GenerationConfig built in code has it) or the neutral
# value that a saved config spells out (transformers writes `do_sample: false`, `repetition_penalty: 1.0`, ...)
NEUTRAL_GENERATION = {"do_sample": (False,), "num_beam_groups": (1,), "diversity_penalty": (0.0,),
                      "repetition_penalty": (1.0,), "encoder_repetition_penalty": (1.0,),
                      "encoder_no_repeat_ngram_size": (0,),
                      "min_length": (0,), "min_new_tokens": (0,), "forced_bos_token_id": (),
                      "suppress_tokens": (), "begin_suppress_tokens": (),
                      "sequence_bias": (), "exponential_decay_length_penalty": (), "renormalize_logits": (False,)}


def runtime_folder() -> Path:
    """The built browser runtime, or a one-line error that says how to build it."""
    folder = Path(str(resources.files("encdec.ship").joinpath(RUNTIME)))
    missing = [name for name in RUNTIME_FILES if not (folder / name).is_file()]
    if missing:
        raise EncdecError(f"The browser runtime is not built (no {missing[0]} in {folder}): run `make web` "
                          "(Node.js and npm) in the encdec repository, then export again.")
    return folder


def check_generation_config(model_dir: Path) -> None:
    """Refuse a generation config that the browser would not decode as ``generate()`` does."""
    config = GenerationConfig.from_pretrained(model_dir)
    changed = [key for key, neutral in NEUTRAL_GENERATION.items()
               if getattr(config, key, None) not in (None, *neutral)]
    if changed == ["forced_bos_token_id"]:  # a multilingual site forces the target language each call names
        raise EncdecError(f"{model_dir / 'generation_config.json'} sets forced_bos_token_id, a fixed first token; the "
                          "site forces the token of the target language each translation names (a multilingual "
                          "model's): remove it to export a site.")
    if changed:
        raise EncdecError(f"{model_dir / 'generation_config.json'} sets {', '.join(changed)}, which the browser "
                          "runtime does not implement (it runs greedy and beam search only); remove them to export "
                          "a site.")


def decoding_rules(model_dir: Path) -> dict:
    """What the browser decodes by, as ``encdec translate`` resolves it (``decoding_options``): the model's defaults
    (beam size, budget, the length penalty beam search divides by, the n-gram size, early stopping), the budget of a
    source when none is asked, the widest beam the site takes, the declared bounds of the options, and the model's
    banned sequences and forced last token (``generation_rules``)."""
    config = GenerationConfig.from_pretrained(model_dir)
    bounds = {item.name: [item.metadata["minimum"], item.metadata["maximum"]] for item in declared(DECODING)}
    return {"defaults": {**resolve(config).describe(), "early_stopping": config.early_stopping or False},
            "budget": AUTO_BUDGET, "max_beams": MAX_BEAMS, "bounds": bounds, **generation_rules(config)}


def generation_rules(config: GenerationConfig) -> dict:
    """``bad_words_ids`` as ``generate()`` applies them (transformers' ``NoBadWordsLogitsProcessor``: a sequence of
    ``</s>`` alone is dropped, ``</s>`` is never banned) and ``forced_eos_token_id`` as a list of ids (or None): the
    tokens of which one ends every output that fills its budget (``ForcedEOSTokenLogitsProcessor``)."""
    def ids(value: int | list[int] | None) -> list[int]:
        return [] if value is None else list(value) if isinstance(value, list) else [value]

    eos_alone = [[token] for token in ids(config.eos_token_id)]
    forced = ids(config.forced_eos_token_id)
    return {"bad_words_ids": [list(words) for words in config.bad_words_ids or [] if list(words) not in eos_alone],
            "forced_eos_token_ids": sorted(forced) or None}


def language_rules(model_dir: Path) -> dict | None:
    """A multilingual model's languages as the browser decodes by them: the codes in the model's order, each one's
    token id, and how a source is built (``SOURCE_TEMPLATE``: its language token, its text, ``</s>``); the target
    language's token is forced as the first generated token. None for a bilingual model (no language tokens)."""
    tokenizer = load_tokenizer(model_dir)
    codes = tokenizer_languages(tokenizer)
    if not codes:
        return None
    return {"codes": codes, "token_ids": {code: tokenizer.get_lang_id(code) for code in codes},
            "source_template": list(SOURCE_TEMPLATE)}


def page_about(model_dir: Path, languages: dict | None, example: str | dict | None = None) -> dict:
    """What the page says about its model: its name and training data (as its card names them), its languages (a
    multilingual model's; a bilingual one's source and target when its card names them; else None) and an example
    input (``example``, else the first ``widget`` entry of the card, the Hugging Face Hub's example input, else the
    date task's: ``date_task_example``), each None when unknown. An example is ``{"text", "source", "target"}``
    (the languages None when it names none)."""
    card = read_card(model_dir)
    results = (card.eval_results or []) if card is not None else []
    datasets = (card.datasets or []) if card is not None else []
    codes = languages["codes"] if languages else list(card_languages(card)) or None
    widget = (card.to_dict().get("widget") or [None])[0] if card is not None else None
    example = page_example(example if example is not None else widget, languages)
    return {"name": (card.model_name if card is not None else None) or model_dir.name,
            "data": results[0].dataset_name if results else datasets[0] if datasets else None,
            "languages": codes, "example": example or date_task_example(model_dir, languages)}


def date_task_example(model_dir: Path, languages: dict | None) -> dict | None:
    """The example of a model trained on the built-in date task (its ``eval_results.json`` records the run's data):
    a date as the task writes its sources, for a multilingual model in its first language, into its second; None
    for another model."""
    try:
        data = json.loads((model_dir / "eval_results.json").read_text(encoding="utf-8"))["config"]["data"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(data, dict) or data.get("format") != "builtin_dates":
        return None
    if not languages:
        return {"text": make_date_pairs(1, seed=data.get("seed") or 0)[0][0], "source": None, "target": None}
    codes = languages["codes"]
    if codes[0] not in DATE_LANGUAGES:
        return None
    return {"text": write_date(dt.date(2021, 3, 3), codes[0]), "source": codes[0], "target": codes[1 % len(codes)]}


def page_example(example: str | dict | None, languages: dict | None) -> dict | None:
    """An example as the page takes it: a text, or a card ``widget`` entry (``text``, optionally ``src_lang`` and
    ``tgt_lang``, transformers' names), or ``{"text", "source", "target"}``; a language a multilingual model
    lacks is refused."""
    if example is None or isinstance(example, str):
        return {"text": example, "source": None, "target": None} if example else None
    found = {"text": example.get("text"), "source": example.get("source", example.get("src_lang")),
             "target": example.get("target", example.get("tgt_lang"))}
    if not isinstance(found["text"], str) or not found["text"].strip():
        return None
    codes = languages["codes"] if languages else []
    unknown = [code for code in (found["source"], found["target"]) if code is not None and code not in codes]
    if unknown:
        raise EncdecError(f"The site's example names the language {unknown[0]!r}, which the model lacks (its "
                          f"languages: {', '.join(codes) or 'none, it is bilingual'}); name one of them or none.")
    return found


def download_record(site: Path, runtime: Path) -> dict:
    """The files a browser downloads to translate beyond the small JSON ones (path in the site -> bytes: the two
    graphs, the tokenizer, ONNX Runtime Web's binary), and their sum: the page's download size and progress."""
    manifest = read_json(site / MODEL_FOLDER / BACKENDS["onnxruntime"].marker, "the ONNX export's manifest")
    files = {f"{MODEL_FOLDER}/{name}": (site / MODEL_FOLDER / name).stat().st_size
             for name in (manifest["encoder"]["file"], manifest["decoder"]["file"], "tokenizer.json")}
    files[WASM] = (runtime / WASM).stat().st_size
    return {"files": files, "bytes": sum(files.values())}


def export_web(model_dir: str | os.PathLike, output_dir: str | os.PathLike, quantize: str = "int8",
               overwrite: bool = False, example: str | dict | None = None) -> Path:
    """Write the static site of the model in ``model_dir`` to ``output_dir`` (see the module docstring), beside it
    under a temporary name and renamed into place when complete; an existing ``output_dir`` is refused unless
    ``overwrite``.

    :param quantize: ``int8`` (ONNX Runtime's dynamic int8 weights: about a quarter of the download) or
        ``float32``
    :param example: the example input the page offers (``page_example``); default: the model card's ``widget``
    """
    if quantize not in QUANTIZE:
        raise EncdecError(f"`quantize` must be one of {list(QUANTIZE)} for a web export, got {quantize!r}.")
    runtime = runtime_folder()
    model_dir = require_model_folder(model_dir)
    refuse_overlap(output_dir, [model_dir])
    output_dir = refuse_existing(output_dir, overwrite, "site folder", folder=True)
    check_generation_config(model_dir)
    languages = language_rules(model_dir)
    about = page_about(model_dir, languages, example)

    def write(staging: Path) -> None:
        export_onnx(model_dir, staging / MODEL_FOLDER, quantize=quantize)
        for name in RUNTIME_FILES:
            shutil.copyfile(runtime / name, staging / name)
        atomic_write_json(staging / MODEL_FOLDER / DECODING_RULES, {
            **decoding_rules(model_dir), "languages": languages, "page": about,
            "download": download_record(staging, runtime)})

    replace_folder(write, output_dir)
    return output_dir


def export_command(model_dir: str | os.PathLike, output_dir: str | os.PathLike, quantize: str, overwrite: bool) -> str:
    """``encdec export --format web`` (its backend's ``exporter``): write the site, and the line it prints."""
    out = export_web(model_dir, output_dir, quantize=quantize, overwrite=overwrite)
    return (f"a site that translates in the browser written to {out} ({site_bytes(out)['total'] / 1e6:.1f} MB); "
            f"serve it with `python -m http.server -d {out}` or `encdec serve ... --offline-site {out}`")


def site_bytes(site: str | os.PathLike) -> dict[str, int]:
    """What a site weighs: the bytes of its runtime files, of its model folder, and in all (what a browser fetches
    to translate, every file once)."""
    site = Path(site)
    model = sum(path.stat().st_size for path in (site / MODEL_FOLDER).rglob("*") if path.is_file())
    runtime = sum((site / name).stat().st_size for name in RUNTIME_FILES)
    return {"runtime": runtime, "model": model, "total": runtime + model}


__all__ = ["DECODING_RULES", "QUANTIZE", "SOURCE_TEMPLATE", "decoding_rules", "download_record", "export_command",
           "export_web", "generation_rules", "language_rules", "page_about", "runtime_folder", "site_bytes"]
