"""The Marian import measured (docs/import.md, "Measured"): ``encdec import`` of a MarianMTModel folder at OPUS-MT's
size, how exactly the imported model is Marian's, and how fast encdec's engines run it against MarianMTModel.

The Marian folder is built here as OPUS-MT ships one (``MarianMTModel.save_pretrained`` and the tokenizer files,
Tiedemann & Thottingal 2020): the base Transformer's dimensions (Vaswani et al. 2017: d_model 512, 6+6 layers, 8
heads, FFN 2048) with OPUS-MT's switches (swish, embeddings scaled by sqrt(d_model), one matrix tied three ways, a
logits bias, here non-zero), random weights, and two unigram SentencePiece models (Kudo 2018) trained on Multi30k's
German and English training sides (Elliott et al. 2016) over one joint ``vocab.json`` in Marian's layout; on the
built-in date data where Multi30k is absent. Then, in one run:

* the import: ``import_marian`` in a fresh process, its wall time (its own logits check included) and peak RSS;
* exactness on the held-out test set: the largest |logit difference| from MarianMTModel (teacher-forced on the
  reference targets), how many greedy and beam outputs are the same tokens, and how many sentences of each side
  ``MarianTokenizer`` gives the same ids;
* speed: MarianMTModel and encdec's engines on the imported folder, timed round-robin as benchmarks/engines.py
  does (random sources, exactly ``new_tokens`` new tokens per sentence, so that every engine does the same work),
  and the peak RSS of one beam search at two batch sizes, each model in a fresh process;
* the browser site (``encdec export --format web``): the download the page reports and the site on disk.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from transformers import GenerationConfig, MarianConfig, MarianMTModel, PreTrainedModel

from encdec.data.dates import make_date_pairs

from .common import (
    BenchmarkSettings,
    Section,
    _reset_peak_rss,
    _rss_kib,
    in_fresh_process,
    make_beam_generate,
    peak_rss_increase_mib,
    random_ids,
)
from .engines import Contender, CT2Worker, time_round_robin, torch_contender, transformer_table
from .multi30k_engines import encdec

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
CARD = "---\nlicense: cc-by-4.0\nlanguage:\n- {0}\n- {1}\n---\n\n# A Marian model of OPUS-MT's size, random weights\n"


@dataclass(frozen=True)
class ImportSettings:
    """The model's size and how much to measure; the report states every one."""

    pieces: int = 8000  # SentencePiece pieces per side (the joint vocab.json holds both sides' pieces)
    d_model: int = 512
    layers: int = 6  # encoder layers = decoder layers
    heads: int = 8
    ffn_dim: int = 2048
    exact_sentences: int = 200  # test sentences of the logits and search comparisons
    exact_batch: int = 20  # sentences per padded batch there
    exact_new_tokens: int = 32  # the search comparisons' budget: random weights seldom end a sentence
    batches: tuple[int, int] = (1, 16)  # the speed workloads' batch sizes, and the two sizes of work for peak RSS
    source_length: int = 24  # random source tokens per sentence (no padding)
    new_tokens: int = 32  # exactly this many new tokens per sentence
    num_beams: int = 4  # OPUS-MT's beam
    warmup: int = 1  # un-timed calls per contender and workload
    repeats: int = 11  # timed calls per contender and workload (the median is reported)
    threads: int = 1  # every engine's intra-op threads (the machine is shared; see benchmarks/common.py)
    seed: int = 0


QUICK_SETTINGS = ImportSettings(pieces=500, d_model=64, layers=1, heads=2, ffn_dim=128, exact_sentences=20,
                                exact_batch=10, exact_new_tokens=8, batches=(1, 4), new_tokens=8, repeats=1)


# ---------------------------------------------------------------------------------------------------------------
# The Marian folder


@dataclass(frozen=True)
class Corpus:
    """Training lines for the SentencePiece models and a held-out test set: (source, target) each."""

    name: str
    languages: tuple[str, str]
    train: tuple[list[str], list[str]]
    test: tuple[list[str], list[str]]


def read_corpus(data: Path | None) -> Corpus:
    """Multi30k de-en (train; test2016) from ``data``, or the built-in dates where it has no Multi30k files."""
    if data is not None and all((data / f"{split}.{lang}").is_file() for split in ("train", "test2016")
                                for lang in ("de", "en")):
        def read(name: str) -> list[str]:
            return (data / name).read_text(encoding="utf-8").splitlines()

        return Corpus("Multi30k", ("de", "en"), (read("train.de"), read("train.en")),
                      (read("test2016.de"), read("test2016.en")))
    from tests.marian_fixtures import target_lines  # the dates in German and French, as the tests' Marian models

    def sources(n: int, seed: int) -> list[str]:
        return [source for source, _ in make_date_pairs(n, seed=seed)]

    logger.info("no Multi30k under %s: the built-in date data instead", data)
    return Corpus("the built-in dates", ("en", "de"), (sources(20000, 1), target_lines(20000, 1)),
                  (sources(1000, 7), target_lines(1000, 7)))


def write_tokenizer(folder: Path, corpus: Corpus, pieces: int) -> int:
    """``source.spm``, ``target.spm``, ``vocab.json`` (``</s>`` 0, ``<unk>`` 1, both sides' pieces, ``<pad>`` last: the
    layout of OPUS-MT's, as ``tests/marian_fixtures.write_marian_tokenizer`` writes it) and ``tokenizer_config.json``
    in ``folder``. Returns the vocabulary's size."""
    from tests.marian_fixtures import spm_pieces, train_spm  # Marian's SentencePiece settings

    # hard_vocab_limit off: a side whose text has fewer pieces to give (Multi30k's English) gets fewer
    models = [train_spm(lines, pieces, hard_vocab_limit=False, num_threads=2) for lines in corpus.train]
    tokens = ["</s>", "<unk>", *dict.fromkeys(spm_pieces(models[0]) + spm_pieces(models[1])), "<pad>"]
    (folder / "source.spm").write_bytes(models[0])
    (folder / "target.spm").write_bytes(models[1])
    (folder / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(tokens)}, ensure_ascii=False),
                                       encoding="utf-8")
    source, target = corpus.languages
    settings = {"source_lang": source, "target_lang": target, "model_max_length": 512, "separate_vocabs": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    return len(tokens)


def write_marian(folder: Path, corpus: Corpus, settings: ImportSettings) -> Path:
    """A MarianMTModel folder of OPUS-MT's shape (module docstring) with random weights, and its tokenizer files.

    Every linear layer is drawn with std 1/sqrt(fan-in) and the shared embedding with std 0.1 (so that the logits
    depend on the source, which the default init of 0.02 leaves mostly to the bias), the logits bias with std 0.5."""
    folder.mkdir(parents=True)
    vocab_size = write_tokenizer(folder, corpus, settings.pieces)
    pad = vocab_size - 1
    config = MarianConfig(
        vocab_size=vocab_size, d_model=settings.d_model, encoder_layers=settings.layers,
        decoder_layers=settings.layers, encoder_attention_heads=settings.heads, decoder_attention_heads=settings.heads,
        encoder_ffn_dim=settings.ffn_dim, decoder_ffn_dim=settings.ffn_dim, max_position_embeddings=512,
        activation_function="swish", scale_embedding=True, share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad)
    torch.manual_seed(settings.seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module is not model.lm_head:  # lm_head is the embedding
                module.weight.normal_(0.0, module.in_features ** -0.5)
        model.get_input_embeddings().weight.normal_(0.0, 0.1)
        model.final_logits_bias.normal_(0.0, 0.5)
    model.generation_config = GenerationConfig(  # OPUS-MT's: never the pad token, </s> ends a full budget
        bad_words_ids=[[pad]], max_length=512, num_beams=settings.num_beams, decoder_start_token_id=pad,
        eos_token_id=0, forced_eos_token_id=0, pad_token_id=pad)
    model.save_pretrained(folder)
    (folder / "README.md").write_text(CARD.format(*corpus.languages), encoding="utf-8")
    return folder


# ---------------------------------------------------------------------------------------------------------------
# The import and its exactness


def timed_import(source: str, output: str) -> dict:
    """``import_marian(source, output)`` (meant for a fresh process): seconds, peak RSS and its rise, the report."""
    from encdec.marian.importer import import_marian

    gc.collect()
    baseline = _rss_kib("VmRSS")
    if not _reset_peak_rss():
        baseline = 0  # the lifetime peak then: the rise is not known
    start = time.perf_counter()
    report = import_marian(source, output)
    seconds = time.perf_counter() - start
    peak = _rss_kib("VmHWM")
    return {"seconds": seconds, "peak_mib": peak / 1024, "rise_mib": (peak - baseline) / 1024,
            "parameters": report.parameters, "missing_pieces": report.missing_pieces,
            "check": report.max_logit_difference}


def same_ids(ours, marian, lines: Sequence[str], key: str) -> int:
    """How many ``lines`` both tokenizers give the same ids (``key``: ``text`` or ``text_target``)."""
    return sum(ours(**{key: line})["input_ids"] == marian(**{key: line})["input_ids"] for line in lines)


def rows(output: torch.Tensor, pad: int) -> list[list[int]]:
    """Each generated sequence without the pad tokens after it (its start token, the pad id, stays)."""
    result = []
    for row in output.tolist():
        while len(row) > 1 and row[-1] == pad:
            row.pop()
        result.append(row)
    return result


@torch.inference_mode()
def model_agreement(ours: PreTrainedModel, marian: PreTrainedModel, tokenizer, corpus: Corpus,
                    settings: ImportSettings) -> dict:
    """The largest |logit difference| (teacher-forced on the references) and the greedy and beam outputs that are
    the same tokens, over the first ``exact_sentences`` test pairs in padded batches."""
    sources, targets = (side[:settings.exact_sentences] for side in corpus.test)
    pad, difference, same = ours.config.pad_token_id, 0.0, {1: 0, settings.num_beams: 0}
    for start in range(0, len(sources), settings.exact_batch):
        batch = tokenizer(sources[start:start + settings.exact_batch],
                          text_target=targets[start:start + settings.exact_batch], padding=True, return_tensors="pt")
        labels = batch.pop("labels")
        decoder_input_ids = ours.prepare_decoder_input_ids_from_labels(labels)
        logits = [model(**batch, decoder_input_ids=decoder_input_ids).logits for model in (ours, marian)]
        difference = max(difference, float((logits[0] - logits[1]).abs().max()))
        for beams in same:  # max_length: the saved 512 yields to max_new_tokens (and transformers says so, unset)
            search = dict(num_beams=beams, max_new_tokens=settings.exact_new_tokens, max_length=None)
            outputs = [rows(model.generate(**batch, **search), pad) for model in (ours, marian)]
            same[beams] += sum(a == b for a, b in zip(*outputs, strict=True))
    return {"difference": difference, "sentences": len(sources), "same_greedy": same[1],
            "same_beam": same[settings.num_beams]}


def exactness(marian_dir: Path, imported: Path, corpus: Corpus, settings: ImportSettings) -> dict:
    """``model_agreement`` and the tokenizer ids of every test sentence, each side, against ``MarianTokenizer``."""
    import warnings

    from transformers import MarianTokenizer

    from encdec.inference import load_model_and_tokenizer

    with warnings.catch_warnings():  # "Recommended: pip install sacremoses.", for a normalizer it never calls
        warnings.simplefilter("ignore")
        marian_tokenizer = MarianTokenizer.from_pretrained(marian_dir)
    model, tokenizer = load_model_and_tokenizer(imported)
    marian = MarianMTModel.from_pretrained(marian_dir).eval()
    sources, targets = corpus.test
    logger.info("tokenizer ids of %d + %d test sentences", len(sources), len(targets))
    figures = {"test_sentences": len(sources),
               "same_source_ids": same_ids(tokenizer, marian_tokenizer, sources, "text"),
               "same_target_ids": same_ids(tokenizer, marian_tokenizer, targets, "text_target")}
    logger.info("logits, greedy and beam %d on %d test sentences", settings.num_beams, settings.exact_sentences)
    return figures | model_agreement(model, marian, tokenizer, corpus, settings)


# ---------------------------------------------------------------------------------------------------------------
# Exports and speed


def timed_export(model: Path, output: Path, fmt: str, weights: str, threads: int) -> float:
    """Seconds of ``encdec export`` in its own process (ctranslate2 never enters this one)."""
    start = time.perf_counter()
    encdec("export", "--model", str(model), "--format", fmt, "--output", str(output), "--quantization", weights,
           threads=threads)
    return time.perf_counter() - start


def web_sizes(site: Path) -> dict:
    """The download the page reports (``encdec_decoding.json``'s ``download``) and the site on disk."""
    from encdec.ship.web_export import DECODING_RULES, MODEL_FOLDER, site_bytes

    download = json.loads((site / MODEL_FOLDER / DECODING_RULES).read_text(encoding="utf-8"))["download"]
    return {"download": download["bytes"], "files": download["files"], **site_bytes(site)}


def benchmark_settings(settings: ImportSettings, batch: int) -> BenchmarkSettings:
    """The engines section's workload at this section's sizes."""
    return replace(BenchmarkSettings(), generation_batch=batch, source_length=settings.source_length,
                   new_tokens=settings.new_tokens, num_beams=settings.num_beams, threads=settings.threads,
                   seed=settings.seed)


def tokens_file(path: Path, tokenizer, settings: BenchmarkSettings) -> Path:
    """The sources of ``make_generate`` (the same seed and ids) as token names: what a CTranslate2 translator reads."""
    generator = torch.Generator().manual_seed(settings.seed + 1)
    ids = random_ids(settings.generation_batch, settings.source_length, len(tokenizer), generator)
    path.write_text(json.dumps([tokenizer.convert_ids_to_tokens(row) for row in ids.tolist()]), encoding="utf-8")
    return path


def speed_contenders(marian_dir: Path, imported: Path, exports: dict[str, Path], settings: ImportSettings,
                     root: Path) -> tuple[dict[int, list[Contender]], list[CT2Worker]]:
    """Per batch size, MarianMTModel (the reference, first) and each of encdec's engines on the imported folder."""
    from encdec.inference import load_model_and_tokenizer
    from encdec.inference.engines import quantize_int8
    from encdec.inference.engines.onnxruntime_engine import OnnxRuntimeEngine

    marian = MarianMTModel.from_pretrained(marian_dir).eval()
    model, tokenizer = load_model_and_tokenizer(imported)
    int8 = quantize_int8(model)
    onnx = OnnxRuntimeEngine(exports["onnx"], threads=settings.threads).model
    contenders, workers = {}, []
    for batch in settings.batches:
        bench = benchmark_settings(settings, batch)
        contenders[batch] = [torch_contender("transformers MarianMTModel, torch float32", marian, bench),
                             torch_contender("encdec, torch float32", model, bench),
                             torch_contender("encdec, torch int8 (`--quantize int8`)", int8, bench),
                             torch_contender("encdec -> ONNX Runtime, int8 weights (`--quantize int8`)", onnx, bench)]
        workers.append(CT2Worker(exports["ctranslate2"], tokens_file(root / f"tokens-{batch}.json", tokenizer, bench),
                                 bench, compute_type="int8"))
        contenders[batch].append(Contender("encdec -> CTranslate2, int8 (`--quantization int8`)", f"ct2-{batch}",
                                           workers[-1].run))
    return contenders, workers


def time_speed(marian_dir: Path, imported: Path, exports: dict[str, Path], settings: ImportSettings,
               root: Path) -> dict[int, list[Contender]]:
    """Every contender of ``speed_contenders``, timed round-robin per batch size and search."""
    contenders, workers = speed_contenders(marian_dir, imported, exports, settings, root)
    try:
        for batch, group in contenders.items():
            for beams in (1, settings.num_beams):
                logger.info("speed, batch %d, %d beam(s): %d warm-up + %d timed calls each", batch, beams,
                            settings.warmup, settings.repeats)
                time_round_robin(group, beams, settings.warmup, settings.repeats)
    finally:
        for worker in workers:
            worker.close()
    return contenders


def load_for_memory(kind: str, folder: str) -> PreTrainedModel:
    """MarianMTModel, or the imported model in float32 or int8 (top-level, for ``peak_rss_increase_mib``), its
    weights resident: both loaders map safetensors files, whose pages would otherwise count in the generate()'s
    rise when it first reads them (the int8 copy is resident from the start)."""
    if kind == "marian":
        model = MarianMTModel.from_pretrained(folder).eval()
    else:
        from encdec.inference import load_model_and_tokenizer
        from encdec.inference.engines import quantize_int8

        model = load_model_and_tokenizer(folder)[0]
        model = quantize_int8(model) if kind == "int8" else model
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.sum()  # reads every page
    return model


MEMORY_ROWS = (("transformers MarianMTModel, torch float32", "marian"), ("encdec, torch float32", "float32"),
               ("encdec, torch int8", "int8"))


def peak_memory(marian_dir: Path, imported: Path, settings: ImportSettings) -> dict[str, list[float]]:
    """Peak RSS rise of one beam search per torch model and batch size, each in a fresh process."""
    memory = {}
    for name, kind in MEMORY_ROWS:
        folder = str(marian_dir if kind == "marian" else imported)
        logger.info("peak RSS of one beam-%d generate(), %s, batches %s", settings.num_beams, name, settings.batches)
        memory[name] = [in_fresh_process(peak_rss_increase_mib, functools.partial(load_for_memory, kind, folder),
                                         make_beam_generate, benchmark_settings(settings, batch), 1)
                        for batch in settings.batches]
    return memory


# ---------------------------------------------------------------------------------------------------------------
# The section


def marian_import(settings: ImportSettings, data: Path | None = MULTI30K, keep: Path | None = None) -> Section:
    """Build the Marian folder, import it, and measure (module docstring); ``keep``: a folder to build in, kept."""
    torch.set_num_threads(settings.threads)
    corpus = read_corpus(data)
    with tempfile.TemporaryDirectory() as tmp:
        root = keep or Path(tmp)
        logger.info("building the Marian folder (SentencePiece on %s)", corpus.name)
        marian_dir = write_marian(root / "marian", corpus, settings)
        logger.info("import_marian, in a fresh process")
        imported = in_fresh_process(timed_import, str(marian_dir), str(root / "imported"))
        imported["weights_mb"] = (marian_dir / "model.safetensors").stat().st_size / 1e6
        figures = {"corpus": corpus, "import": imported, "vocab_size": json.loads(
                       (marian_dir / "config.json").read_text(encoding="utf-8"))["vocab_size"],
                   "exact": exactness(marian_dir, root / "imported", corpus, settings), "export_s": {}}
        exports = {fmt: root / fmt for fmt in ("ctranslate2", "onnx", "web")}
        for fmt, folder in exports.items():
            logger.info("encdec export --format %s (int8)", fmt)
            figures["export_s"][fmt] = timed_export(root / "imported", folder, fmt, "int8", settings.threads)
        figures["web"] = web_sizes(exports["web"])
        figures["speed"] = time_speed(marian_dir, root / "imported", exports, settings, root)
        figures["memory"] = peak_memory(marian_dir, root / "imported", settings)
    return Section("Measured", method_text(settings, figures), tables(settings, figures))


def method_text(settings: ImportSettings, figures: dict) -> str:
    s, corpus, done = settings, figures["corpus"], figures["import"]
    return (
        f"A Marian folder built by `benchmarks/marian_import.py` as OPUS-MT ships one: `MarianMTModel` with d_model "
        f"{s.d_model}, {s.layers}+{s.layers} layers, {s.heads} heads, FFN {s.ffn_dim}, swish, scaled embeddings "
        f"tied three ways, a non-zero `final_logits_bias`, random weights ({done['parameters']:,} parameters; "
        f"`model.safetensors` {done['weights_mb']:.0f} MB), and two unigram SentencePiece models of up to "
        f"{s.pieces:,} pieces trained on {corpus.name}'s training sides (source {corpus.languages[0]}, target "
        f"{corpus.languages[1]}) over one `vocab.json` of {figures['vocab_size']:,} tokens. Exactness is measured "
        f"on {corpus.name}'s test sentences: logits teacher-forced on the reference translations, greedy and beam "
        f"{s.num_beams} with the saved generation config (up to {s.exact_new_tokens} new tokens: random weights "
        "seldom end a sentence), padded batches of "
        f"{s.exact_batch}. Speed: random sources of {s.source_length} tokens with exactly {s.new_tokens} new tokens "
        "each (`min_new_tokens = max_new_tokens`, so that every engine does the same work), greedy and beam "
        f"{s.num_beams}, {s.threads} thread(s) in every engine, all contenders timed round-robin in the same run as "
        f"`benchmarks/engines.py` does, {s.repeats} timed calls each after {s.warmup} un-timed. ONNX Runtime runs the "
        "graphs of `encdec export --format onnx --quantize int8` in this process, searched by transformers' "
        "`generate()` as `--engine onnxruntime` does; CTranslate2 those of `encdec export --format ctranslate2 "
        "--quantization int8`, computing in int8, in its own process that never imports torch "
        "(`benchmarks/ct2_worker.py`). *x Marian*: the median over rounds of MarianMTModel's call time / the "
        "contender's (> 1: faster than MarianMTModel), with its quartiles. Peak RSS: the rise over one "
        f"beam-{s.num_beams} `generate()` after the model is loaded, each model and batch in a fresh process "
        "(`benchmarks/common.py`)."
    )


def tables(settings: ImportSettings, figures: dict) -> str:
    """The import and exactness, the site, speed per batch size, and peak memory, as markdown."""
    small, large = settings.batches
    speed = "\n\n".join(f"Batch {batch} ({batch * settings.new_tokens:,} new tokens a call):\n\n"
                         f"{transformer_table(group, benchmark_settings(settings, batch))}"
                         for batch, group in figures["speed"].items())
    memory = [f"| Model | Batch {small}, MiB | Batch {large}, MiB | Batch {large} / batch {small} |",
              "|---|---:|---:|---:|"]
    for name, (one, many) in figures["memory"].items():
        memory.append(f"| {name} | {one:,.1f} | {many:,.1f} | {many / one:.2f} |")
    return "\n\n".join([import_table(settings, figures), speed,
                         f"Peak RSS rise over one beam-{settings.num_beams} `generate()`:", "\n".join(memory)])


def import_table(settings: ImportSettings, figures: dict) -> str:
    done, exact, web, export = figures["import"], figures["exact"], figures["web"], figures["export_s"]
    n, test = exact["sentences"], exact["test_sentences"]
    mb = lambda size: f"{size / 1e6:.1f} MB"  # noqa: E731
    rows = [
        ("`import_marian` (loading, converting, writing, its own logits check)",
         f"{done['seconds']:.1f} s, peak RSS {done['peak_mib']:,.0f} MiB ({done['rise_mib']:,.0f} MiB above the "
         "process before it)"),
        ("its own check (4 sentences)", f"max \\|logit difference\\| {done['check']:.3g}"),
        (f"max \\|logit difference\\| from MarianMTModel, {n} test pairs teacher-forced", f"{exact['difference']:.3g}"),
        (f"greedy, the same tokens (up to {settings.exact_new_tokens} new)", f"{exact['same_greedy']} of {n}"),
        (f"beam {settings.num_beams}, the same tokens (up to {settings.exact_new_tokens} new)",
         f"{exact['same_beam']} of {n}"),
        ("`MarianTokenizer`'s ids, test sources", f"{exact['same_source_ids']:,} of {test:,}"),
        ("`MarianTokenizer`'s ids, test targets (`text_target=`)", f"{exact['same_target_ids']:,} of {test:,}"),
        ("`encdec export`, int8, seconds",
         ", ".join(f"{fmt} {seconds:.0f} s" for fmt, seconds in export.items())),
        ("the site (`--format web`): download the page reports",
         f"{mb(web['download'])} ({', '.join(f'{name} {mb(size)}' for name, size in web['files'].items())})"),
        ("the site on disk", f"{mb(web['total'])} (runtime {mb(web['runtime'])}, model {mb(web['model'])})"),
    ]
    return "\n".join(["| | |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)])
