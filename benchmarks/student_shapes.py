"""The student shapes section: how fast beam search is for Transformer shapes a fast distillation student could take.

Chooses the shape of ``configs/multi30k-transformer-fast.yaml`` before anything is trained: each shape is built with
random weights (speed does not depend on the values when every output has the same length), given a BPE vocabulary
trained on Multi30k's training split, exported to CTranslate2 int8 and timed in a process that never imports torch
(``student_shapes_worker.py``), decoding the first 320 test2016 sources in batches of 32 to exactly 16 tokens,
alternating between shapes. A smaller vocabulary splits sentences into more tokens, so each row also gives the mean
test2016 reference length in its tokens and the speed-up corrected for it (speed-up x transformer-small's length /
this vocabulary's). Skipped without ``data/multi30k``.

    python scripts/benchmark.py --sections student_shapes
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM

from encdec import TransformerSeq2SeqConfig
from encdec.tokenization import train_tokenizer_from_files
from encdec.training import special_token_ids

from .common import BenchmarkSettings, Section

logger = logging.getLogger(__name__)

NEW_TOKENS = 16  # about a Multi30k English sentence in 8k BPE tokens (14.5 on test2016)
SENTENCES = 320
ROUNDS = 4
# name -> (d_model, encoder layers, decoder layers, vocabulary, pre-LN); the first is transformer-small's shape
SHAPES = {
    "transformer-small: 3+3, d=256, 8k": (256, 3, 3, 8000, False),
    "6+1, d=256, 8k": (256, 6, 1, 8000, True),
    "6+1, d=192, 8k": (192, 6, 1, 8000, True),
    "6+1, d=256, 6k": (256, 6, 1, 6000, True),
    "6+1, d=192, 6k (transformer-fast)": (192, 6, 1, 6000, True),
}


def build(root: Path, data: Path, threads: int) -> dict[str, tuple[Path, float]]:
    """name -> (CTranslate2 int8 export, mean test2016 reference length in the shape's tokens)."""
    references = (data / "test2016.en").read_text(encoding="utf-8").splitlines()
    tokenizers, built = {}, {}
    for name, (width, encoder, decoder, vocabulary, pre_ln) in SHAPES.items():
        if vocabulary not in tokenizers:
            tokenizers[vocabulary] = train_tokenizer_from_files([data / "train.de", data / "train.en"],
                                                                root / f"tokenizer-{vocabulary}", vocab_size=vocabulary)
        tokenizer = tokenizers[vocabulary]
        config = TransformerSeq2SeqConfig(
            d_model=width, encoder_layers=encoder, decoder_layers=decoder,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=4 * width,
            decoder_ffn_dim=4 * width, normalize_before=pre_ln, tie_word_embeddings=True,
            **special_token_ids(tokenizer))
        torch.manual_seed(0)
        folder, export = root / f"model-{len(built)}", root / f"ct2-{len(built)}"
        AutoModelForSeq2SeqLM.from_config(config).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        subprocess.run([sys.executable, "-m", "encdec", "export", "--model", str(folder), "--format", "ctranslate2",
                        "--output", str(export), "--quantization", "int8"], check=True, capture_output=True,
                       env={**os.environ, "OMP_NUM_THREADS": str(threads)})
        built[name] = (export, statistics.mean(len(tokenizer(line).input_ids) for line in references))
    return built


def student_shapes(settings: BenchmarkSettings) -> Section | None:
    data = Path(os.environ.get("MULTI30K_DIR", "data/multi30k"))
    if not (data / "train.de").is_file():
        logger.info("student_shapes skipped: %s is missing", data / "train.de")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        built = build(Path(tmp), data, settings.threads)
        worker = [sys.executable, str(Path(__file__).with_name("student_shapes_worker.py")),
                  str(data / "test2016.de"), *[str(export) for export, _ in built.values()], "--threads",
                  str(settings.threads), "--sentences", str(SENTENCES), "--new-tokens", str(NEW_TOKENS),
                  "--rounds", str(ROUNDS), "--beams", str(settings.num_beams), "1"]
        done = subprocess.run(worker, check=True, capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": str(settings.threads)})
    speeds = json.loads(done.stdout.strip().splitlines()[-1])  # beams -> sentences/s per export, in order
    return Section("Fast student shapes", method_text(settings), table(built, speeds, settings.num_beams))


def table(built: dict[str, tuple[Path, float]], speeds: dict[str, list[float]], beam: int) -> str:
    lengths = [length for _, length in built.values()]
    lines = [f"| shape: layers, width, vocabulary | beam {beam} sentences/s | x transformer-small "
             "| greedy sentences/s | x transformer-small | test2016 reference tokens | beam "
             f"{beam} x transformer-small, length-corrected |", "|---|---:|---:|---:|---:|---:|---:|"]
    for i, name in enumerate(built):
        wide, narrow = speeds[str(beam)], speeds["1"]
        ratio = wide[i] / wide[0]
        lines.append(f"| {name} | {wide[i]:.1f} | {ratio:.2f} | {narrow[i]:.1f} | {narrow[i] / narrow[0]:.2f} | "
                     f"{lengths[i]:.2f} | {ratio * lengths[0] / lengths[i]:.2f} |")
    return "\n".join(lines)


def method_text(settings: BenchmarkSettings) -> str:
    return (
        f"Random-weight Transformers of each shape (4 heads, feed-forward 4 x width, tied embeddings), each with a "
        f"joint BPE vocabulary of its size trained on Multi30k's training split, exported to CTranslate2 int8 and "
        f"timed in one process that never imports torch (`benchmarks/student_shapes_worker.py`), "
        f"{settings.threads} thread: the first {SENTENCES} test2016 sources in batches of 32, decoded to exactly "
        f"{NEW_TOKENS} tokens each, beam {settings.num_beams} and greedy; the median of {ROUNDS} rounds, the order "
        "reversed every round. *x transformer-small* divides by the first row's speed. The last column corrects the "
        "beam speed-up for the longer token sequences of a smaller vocabulary (mean test2016 reference length in "
        "transformer-small's tokens over this shape's)."
    )
