"""``encdec export --format web``: a static site that translates in the browser, with no server round trip and no
CDN: the ONNX export of a model (``encdec.ship.onnx_export``, int8 weights by default) run by ONNX Runtime Web
(https://onnxruntime.ai/docs/tutorials/web/, its WebAssembly backend, single-threaded) in a Web Worker, the
model's tokenizer read by tokenizers.js, and greedy and beam search as ``generate()`` runs them.

The site::

    index.html          a translate page (window.encdec, below)
    encdec.js           the library: ``window.encdec.translate(lines, {numBeams, maxNewTokens})`` -> Promise
    encdec-worker.js    ONNX Runtime Web, the tokenizer and the search, bundled (runs off the page's thread)
    ort-wasm.wasm.gz    ONNX Runtime Web's WebAssembly binary, gzipped (the worker inflates it)
    web-runtime.json    the npm packages it was built from: versions and integrity hashes
    model/              the ONNX export: encoder_model.onnx, decoder_model_merged.onnx, encdec_onnx.json, config,
                        generation config, tokenizer; and encdec_decoding.json, the rules the browser decodes by
                        (``decoding_rules``), so that the JavaScript restates none of them

The JavaScript is built from the npm registry by ``make web`` (``npm ci`` on web/package-lock.json, pinned by
version and integrity hash, then an esbuild bundle) into the package data folder ``web_runtime/``; this module
copies it beside the model. Any static file server serves the site (``python -m http.server``), and so does
``encdec serve --offline-site SITE`` at ``/offline``.

The browser runs one logits processor, ``no_repeat_ngram_size``: a generation config that sets another
(``repetition_penalty``, ``min_length``, ...) or samples is refused, since the site would translate differently from
``encdec translate``.
"""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

from transformers import GenerationConfig

from ..backends import BACKENDS
from ..decoding_options import AUTO_BUDGET, DECODING, declared, resolve
from ..errors import EncdecError
from ..folders import require_model_folder
from ..io_utils import atomic_write_json, refuse_existing, refuse_overlap, replace_folder
from .onnx_export import export_onnx

RUNTIME = "web_runtime"  # package data: what `make web` builds
RUNTIME_FILES = ("index.html", "encdec.js", "encdec-worker.js", "ort-wasm.wasm.gz", "web-runtime.json")
MODEL_FOLDER = "model"
DECODING_RULES = "encdec_decoding.json"  # in the model folder: what the browser decodes by (``decoding_rules``)
MAX_BEAMS = 16  # the widest beam the page and window.encdec.translate accept (one source at a time, in WebAssembly)
QUANTIZE = BACKENDS["web"].export_quantize  # int8 (the default), float32
# the generation settings beyond greedy and beam search (logits processors, sampling, group beam search), each with
# the values that leave decoding as it is: unset (None, as a GenerationConfig built in code has it) or the neutral
# value that a saved config spells out (transformers writes `do_sample: false`, `repetition_penalty: 1.0`, ...)
NEUTRAL_GENERATION = {"do_sample": (False,), "num_beam_groups": (1,), "diversity_penalty": (0.0,),
                      "repetition_penalty": (1.0,), "encoder_repetition_penalty": (1.0,),
                      "encoder_no_repeat_ngram_size": (0,), "bad_words_ids": (),
                      "min_length": (0,), "min_new_tokens": (0,), "forced_bos_token_id": (),
                      "forced_eos_token_id": (), "suppress_tokens": (), "begin_suppress_tokens": (),
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
    if changed:
        raise EncdecError(f"{model_dir / 'generation_config.json'} sets {', '.join(changed)}, which the browser "
                          "runtime does not implement (it runs greedy and beam search only); remove them to export "
                          "a site.")


def decoding_rules(model_dir: Path) -> dict:
    """What the browser decodes by, as ``encdec translate`` resolves it (``decoding_options``): the model's defaults
    (beam size, budget, the length penalty beam search divides by, the n-gram size, early stopping), the budget of a
    source when none is asked, the widest beam the site takes, and the declared bounds of the options."""
    config = GenerationConfig.from_pretrained(model_dir)
    bounds = {item.name: [item.metadata["minimum"], item.metadata["maximum"]] for item in declared(DECODING)}
    return {"defaults": {**resolve(config).describe(), "early_stopping": config.early_stopping or False},
            "budget": AUTO_BUDGET, "max_beams": MAX_BEAMS, "bounds": bounds}


def export_web(model_dir: str | os.PathLike, output_dir: str | os.PathLike, quantize: str = "int8",
               overwrite: bool = False) -> Path:
    """Write the static site of the model in ``model_dir`` to ``output_dir`` (see the module docstring), beside it
    under a temporary name and renamed into place when complete; an existing ``output_dir`` is refused unless
    ``overwrite``.

    :param quantize: ``int8`` (ONNX Runtime's dynamic int8 weights: about a quarter of the download) or
        ``float32``
    """
    if quantize not in QUANTIZE:
        raise EncdecError(f"`quantize` must be one of {list(QUANTIZE)} for a web export, got {quantize!r}.")
    runtime = runtime_folder()
    model_dir = require_model_folder(model_dir)
    refuse_overlap(output_dir, [model_dir])
    output_dir = refuse_existing(output_dir, overwrite, "site folder", folder=True)
    check_generation_config(model_dir)

    def write(staging: Path) -> None:
        export_onnx(model_dir, staging / MODEL_FOLDER, quantize=quantize)
        atomic_write_json(staging / MODEL_FOLDER / DECODING_RULES, decoding_rules(model_dir))
        for name in RUNTIME_FILES:
            shutil.copyfile(runtime / name, staging / name)

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


__all__ = ["DECODING_RULES", "QUANTIZE", "decoding_rules", "export_command", "export_web", "runtime_folder",
           "site_bytes"]
