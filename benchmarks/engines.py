"""The engines section: encdec's models on every inference engine and precision, against MarianMTModel.

At the Transformer section's dimensions and workload (random weights and sources, exactly ``new_tokens`` tokens per
sentence, greedy and beam search):

- transformers' ``MarianMTModel`` in float32: the reference of every ratio;
- encdec's Transformer in torch: float32, dynamic int8 (``--quantize int8``) and bfloat16 (``--dtype bfloat16``);
- the same weights exported to CTranslate2 (``encdec export``), with float32 and int8 weights;
- the Marian weights converted by CTranslate2's own Marian converter, in float32: what the engine gives a model it
  knows;
- every RNN attention variant in torch float32, int8 and bfloat16 (at the RNN section's dimensions).

Each CTranslate2 model runs in its own worker process that never imports torch (``ct2_worker.py``); this process
never imports ctranslate2, and the export runs in a separate process too. Calls go round-robin, one per contender
per round, with a short pause whenever the next call runs in another process, so one runtime's spinning threads
do not land on the other's timing. Ratios are medians of per-round ratios.
"""

from __future__ import annotations

import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tokenizers import Tokenizer, models
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from encdec.inference.engines import quantize_int8

from .common import (
    BenchmarkSettings,
    Section,
    in_fresh_process,
    make_generate,
    paired_ratios,
    random_ids,
    seeded,
)
from .rnn import RNN_VARIANTS, RNNDims, build_rnn
from .transformer import TransformerDims, build_encdec_transformer, build_marian

logger = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("ct2_worker.py")
SWITCH_PAUSE_S = 0.3  # idle time before a call that runs in another process than the previous call


def word_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A word-level tokenizer whose ids are the benchmark's: <pad> <s> </s> <unk>, then t4 ... t{V-1}."""
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{f"t{i}": i for i in range(4, vocab_size)}}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
                                   pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def source_tokens(settings: BenchmarkSettings, vocab_size: int) -> list[list[str]]:
    """The sources of ``make_generate`` (same seed), as tokens: what a CTranslate2 translator reads."""
    generator = torch.Generator().manual_seed(settings.seed + 1)
    ids = random_ids(settings.generation_batch, settings.source_length, vocab_size, generator)
    names = word_tokenizer(vocab_size).convert_ids_to_tokens
    return [names(row) for row in ids.tolist()]


class _MarianVocabulary:
    """What CTranslate2's Marian loader reads from a tokenizer: the vocabulary and two special tokens. The loader
    expects Marian's layout, where transformers appended ``<pad>`` as the last id, and drops that row; so the last
    id is named ``<pad>`` here (the converted model has one output row fewer, 0.01% of the softmax)."""

    def __init__(self, vocab_size: int) -> None:
        vocab = word_tokenizer(vocab_size).get_vocab()
        names = {index: token for token, index in vocab.items()}
        names[0], names[vocab_size - 1] = "<pad0>", "<pad>"
        self.vocab = {token: index for index, token in names.items()}
        self.eos_token, self.unk_token, self.special_tokens_map = "</s>", "<unk>", {}

    def get_vocab(self) -> dict[str, int]:
        return self.vocab


def export_models(encdec_state: dict, marian_state: dict, root: str) -> float:
    """In a fresh process (ctranslate2 never enters the timing process): encdec's Transformer through ``encdec
    export`` with float32 and int8 weights, and Marian through CTranslate2's Marian loader. Returns 0."""
    from ctranslate2.converters.transformers import MarianMTLoader

    from encdec.folders import save_for_pipeline
    from encdec.ship.ctranslate2_export import export_ctranslate2

    dims = TransformerDims()
    encdec, marian = build_encdec_transformer(dims), build_marian(dims)
    encdec.load_state_dict(encdec_state)
    marian.load_state_dict(marian_state)
    folder = save_for_pipeline(encdec, word_tokenizer(dims.vocab_size), Path(root) / "encdec")
    export_ctranslate2(folder, Path(root) / "ct2-encdec-float32")
    export_ctranslate2(folder, Path(root) / "ct2-encdec-int8", quantization="int8")
    spec = MarianMTLoader()(marian, _MarianVocabulary(dims.vocab_size))
    spec.validate()
    spec.optimize(quantization=None)
    (Path(root) / "ct2-marian-float32").mkdir()
    spec.save(str(Path(root) / "ct2-marian-float32"))
    return 0.0


@dataclass
class Contender:
    """One engine and precision: ``run(num_beams, calls)`` times that many calls and returns their seconds."""

    name: str
    process: str  # "torch", or the worker's name
    run: Callable[[int, int], list[float]]
    times: dict[int, list[float]] = field(default_factory=dict)


def torch_contender(name: str, model: PreTrainedModel, settings: BenchmarkSettings) -> Contender:
    calls = {beams: make_generate(model, settings, beams) for beams in (1, settings.num_beams)}

    def run(num_beams: int, n: int) -> list[float]:
        times = []
        for _ in range(n):
            start = time.perf_counter()
            calls[num_beams]()
            times.append(time.perf_counter() - start)
        return times

    return Contender(name, "torch", run)


class CT2Worker:
    """A ``ct2_worker.py`` process holding one CTranslate2 model."""

    def __init__(self, model_dir: Path, tokens_file: Path, settings: BenchmarkSettings,
                 compute_type: str = "float32") -> None:
        command = [sys.executable, str(WORKER), str(model_dir), str(tokens_file), "--threads", str(settings.threads),
                   "--new-tokens", str(settings.new_tokens), "--compute-type", compute_type]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.read()  # {"ready": true} once the model is loaded

    def read(self):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the CTranslate2 worker exited with status {self.process.wait()}")
        return json.loads(line)

    def run(self, num_beams: int, n: int) -> list[float]:
        self.process.stdin.write(json.dumps({"beam": num_beams, "calls": n}) + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def time_round_robin(contenders: Sequence[Contender], num_beams: int, warmup: int, repeats: int) -> None:
    """``repeats`` timed calls per contender, one each per round, in reversed order every other round."""
    previous = None
    for contender in contenders:
        contender.run(num_beams, warmup)
    for round_index in range(repeats):
        order = contenders if round_index % 2 == 0 else list(reversed(contenders))
        for contender in order:
            if previous is not None and contender.process != previous:
                time.sleep(SWITCH_PAUSE_S)
            contender.times.setdefault(num_beams, []).extend(contender.run(num_beams, 1))
            previous = contender.process


def cell(tokens: int, ours: Sequence[float], reference: Sequence[float]) -> str:
    """tokens/s | ratio to the reference (IQR)"""
    median, q1, q3 = paired_ratios(reference, ours)
    return f"{tokens / statistics.median(ours):,.0f} | {median:.2f} ({q1:.2f}-{q3:.2f})"


def transformer_table(contenders: Sequence[Contender], settings: BenchmarkSettings) -> str:
    tokens = settings.generation_batch * settings.new_tokens
    beam = settings.num_beams
    marian = contenders[0].times
    lines = [f"| Engine, weights | Greedy, new tokens/s | x Marian (IQR) | Beam {beam}, new tokens/s "
             "| x Marian (IQR) |", "|---|---:|---:|---:|---:|"]
    for c in contenders:
        lines.append(f"| {c.name} | {cell(tokens, c.times[1], marian[1])} | "
                     f"{cell(tokens, c.times[beam], marian[beam])} |")
    return "\n".join(lines)


def rnn_table(contenders: Sequence[Contender], marian: Contender, settings: BenchmarkSettings) -> str:
    tokens = settings.generation_batch * settings.new_tokens
    beam = settings.num_beams
    lines = [f"| Variant | Precision | Greedy, new tokens/s | x float32 (IQR) | x Marian | Beam {beam}, new tokens/s "
             "| x float32 (IQR) | x Marian |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for i, c in enumerate(contenders):
        variant, precision = c.name.rsplit(", ", 1)
        base = contenders[i - i % 3]  # the variant's float32 row
        cells = []
        for beams in (1, beam):
            median, q1, q3 = paired_ratios(base.times[beams], c.times[beams])
            vs_marian = paired_ratios(marian.times[beams], c.times[beams])[0]
            cells.append(f"{tokens / statistics.median(c.times[beams]):,.0f} | {median:.2f} ({q1:.2f}-{q3:.2f}) "
                         f"| {vs_marian:.2f}")
        lines.append(f"| {variant} | {precision} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def transformer_contenders(settings: BenchmarkSettings, root: Path) -> tuple[list[Contender], list[CT2Worker]]:
    dims = TransformerDims()
    marian = seeded(lambda: build_marian(dims), settings.seed).eval()
    encdec = seeded(lambda: build_encdec_transformer(dims), settings.seed).eval()
    logger.info("exporting to CTranslate2 (in a separate process)")
    in_fresh_process(export_models, encdec.state_dict(), marian.state_dict(), str(root))
    tokens_file = root / "tokens.json"
    tokens_file.write_text(json.dumps(source_tokens(settings, dims.vocab_size)))
    contenders = [torch_contender("transformers MarianMTModel, torch float32", marian, settings),
                  torch_contender("encdec, torch float32", encdec, settings),
                  torch_contender("encdec, torch int8 (`--quantize int8`)", quantize_int8(encdec), settings),
                  torch_contender("encdec, torch bfloat16 (`--dtype bfloat16`)", build_bf16(encdec), settings)]
    workers = []
    # the int8 export computes in int8 only when loaded so (compute_type="int8", as `--engine ctranslate2
    # --quantize int8` loads it); with the default float32 CTranslate2 widens its weights back to float32
    for name, folder, compute in (("encdec -> CTranslate2, float32", "ct2-encdec-float32", "float32"),
                                  ("encdec -> CTranslate2, int8 (`--quantization int8`, int8 compute)",
                                   "ct2-encdec-int8", "int8"),
                                  ("Marian -> CTranslate2 (its Marian converter), float32", "ct2-marian-float32",
                                   "float32")):
        workers.append(CT2Worker(root / folder, tokens_file, settings, compute_type=compute))
        contenders.append(Contender(name, folder, workers[-1].run))
    return contenders, workers


def rnn_contenders(settings: BenchmarkSettings) -> list[Contender]:
    dims, contenders = RNNDims(), []
    for variant in RNN_VARIANTS:
        model = seeded(lambda v=variant: build_rnn(dims, v), settings.seed).eval()
        contenders += [torch_contender(f"{variant.label}, float32", model, settings),
                       torch_contender(f"{variant.label}, int8", quantize_int8(model), settings),
                       torch_contender(f"{variant.label}, bfloat16", build_bf16(model), settings)]
    return contenders


def build_bf16(model: PreTrainedModel) -> PreTrainedModel:
    copy = type(model)(model.config).eval()
    copy.load_state_dict(model.state_dict())
    return copy.to(torch.bfloat16)


def engines(settings: BenchmarkSettings) -> Section:
    """Every engine and precision of encdec's models, with Marian's as the reference."""
    torch.set_num_threads(settings.threads)
    repeats, warmup = settings.rnn_generation_repeats, settings.generation_warmup
    with tempfile.TemporaryDirectory() as tmp:
        contenders, workers = transformer_contenders(settings, Path(tmp))
        try:
            for beams in (1, settings.num_beams):
                logger.info("engines, Transformer (%d beam(s)): %d warm-up + %d timed calls each", beams, warmup,
                            settings.generation_repeats)
                time_round_robin(contenders, beams, warmup, settings.generation_repeats)
        finally:
            for worker in workers:
                worker.close()
    marian = Contender(contenders[0].name, "torch", contenders[0].run)
    rnns = rnn_contenders(settings)
    for beams in (1, settings.num_beams):
        logger.info("engines, RNN (%d beam(s)): %d warm-up + %d timed calls each", beams, warmup, repeats)
        time_round_robin([marian, *rnns], beams, warmup, repeats)
    return Section("Inference engines and precisions", method_text(settings),
                   transformer_table(contenders, settings) + "\n\n" + rnn_table(rnns, marian, settings))


def method_text(settings: BenchmarkSettings) -> str:
    dims, rnn = TransformerDims(), RNNDims()
    return (
        f"Generation only, as in the sections below: {settings.generation_batch} random sources of "
        f"{settings.source_length} tokens, exactly {settings.new_tokens} new tokens each, greedy and beam "
        f"{settings.num_beams}, {settings.threads} thread(s) in every engine. Transformer rows: vocabulary "
        f"{dims.vocab_size}, d_model {dims.d_model}, {dims.layers}+{dims.layers} layers; RNN rows: embedding "
        f"{rnn.embedding_dim}, hidden {rnn.hidden_size}, bidirectional {rnn.cell_type.upper()} encoder. "
        "*torch int8*: `encdec.inference.engines.quantize_int8` (dynamic int8 of every linear and LSTM layer); "
        "*bfloat16*: "
        "the model cast to bfloat16 (torch runs it with this CPU's AVX512-BF16 instructions; CTranslate2 4.8 offers "
        "no bfloat16 compute on it, so it has no bfloat16 row). *CTranslate2*: "
        "encdec's model exported by `encdec export` (float32 weights; int8 weights loaded for int8 compute), and "
        "the Marian model converted by CTranslate2's own Marian loader; each in its own worker process that never "
        "imports torch (`benchmarks/ct2_worker.py`), timed round-robin with the torch contenders, with a "
        f"{SWITCH_PAUSE_S} s pause before a call in another process. *x Marian*: the median over rounds of "
        "Marian's call time / the contender's (> 1: faster than MarianMTModel in transformers); *x float32*: "
        "the same against the variant's float32 model."
    )
