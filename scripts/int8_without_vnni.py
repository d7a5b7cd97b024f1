"""int8 ONNX graphs on an x86 CPU without VNNI, emulated: how far each quantization scheme's outputs are from torch's.

    python scripts/int8_without_vnni.py prepare --model runs/demo-transformer --output /tmp/int8-cpu
    qemu-x86_64 -cpu Haswell .venv/bin/python scripts/int8_without_vnni.py check /tmp/int8-cpu   # AVX2, no AVX-512
    python scripts/int8_without_vnni.py check /tmp/int8-cpu                                      # this CPU
    qemu-x86_64 -cpu Haswell .venv/bin/python scripts/int8_without_vnni.py engines /tmp/int8-cpu # torch, CTranslate2

``prepare`` (torch and encdec) exports the model in float32 and quantizes copies with each scheme of
``INT8_SCHEMES``, and stores a padded batch of sources, the decoder's first-step feeds, and torch's encoder outputs
and first-step logits. ``check`` imports only numpy and ONNX Runtime, so that it runs under QEMU's user-mode
emulation (``apt-get install qemu-user``; QEMU 7.2's TCG emulates AVX2 but no AVX-512, so ONNX Runtime picks its
AVX2 kernels there, as on an AVX2-only CPU): it runs each copy's encoder and first decoder step and prints, per
scheme, the largest difference from torch's as a share of the range of torch's values (the export accepts an int8
copy up to 0.1), and the CPU's vector extensions as numpy's CPUID detection reports them. ``engines`` does the same
for torch's int8 (``--quantize int8``) and CTranslate2's (an int8 ``Translator`` of the model's CTranslate2 export,
which ``prepare`` writes for a Transformer) against their float32, teacher forced over the batch; ``speed`` times
each scheme's graphs (a Transformer's: the encoder and eleven greedy decoder steps over 32 random sources, one
thread), natively only: emulated timings mean nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

SOURCE_LENGTHS = (9, 6, 3, 1)
PREFIX = 5  # target tokens after the start token, for the engines' teacher-forced comparison


def prepare(model_dir: Path, output: Path) -> None:
    """The float32 export, one quantized copy per scheme, and ``feeds.npz``/``plan.json`` (see the docstring)."""
    import torch

    from encdec.inference import load_model_and_tokenizer
    from encdec.inference.engines.onnx_layout import EMPTY, read_layout
    from encdec.ship.onnx_export import INT8_SCHEMES, export_onnx, quantize_graphs, trace_batch
    from encdec.ship.onnx_graphs import graph_modules

    base = export_onnx(model_dir, output / "float32", overwrite=True)
    layout = read_layout(base)
    for scheme, settings in INT8_SCHEMES.items():
        shutil.rmtree(output / scheme, ignore_errors=True)
        shutil.copytree(base, output / scheme)
        quantize_graphs(output / scheme, layout, settings)
        replace(layout, weights="int8").write(output / scheme)
    model, _ = load_model_and_tokenizer(model_dir)
    if model.config.model_type == "transformer_seq2seq":
        model.set_attn_implementation("eager")
    ids, mask = trace_batch(model.config, SOURCE_LENGTHS, seed=3)
    start = torch.full((len(ids), 1), model.config.decoder_start_token_id)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=start).logits[:, 0].numpy()
        encoded = [tensor.numpy() for tensor in graph_modules(model)[0](ids, mask)]
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "logits": logits,
             **{f"encoded.{name}": value for name, value in zip(layout.encoder.outputs, encoded, strict=True)}}
    plan = {"encoder_outputs": layout.encoder.outputs, "decoder_outputs": layout.decoder.outputs, "decoder": {}}
    sizes = {"batch": len(ids), "past_len": 0}
    decoder_feeds = {"input_ids": ("feed", "start"), "encoder_attention_mask": ("feed", "attention_mask"),
                     **{name: ("encoded", name) for name in layout.decoder.encoder_inputs}}
    feeds["start"] = start.numpy()
    for entry in layout.state:
        if entry.init == EMPTY:
            feeds[entry.past] = np.zeros([sizes.get(dim, dim) for dim in entry.shape], np.float32)
            decoder_feeds[entry.past] = ("feed", entry.past)
        else:
            decoder_feeds[entry.past] = ("encoded", entry.init)
    plan["decoder"] = {name: source for name, source in decoder_feeds.items() if name in layout.decoder.inputs}
    prefix = torch.cat([start, trace_batch(model.config, (PREFIX,) * len(ids), seed=4)[0]], dim=1)
    with torch.no_grad():
        feeds["prefix"] = prefix.numpy()
        feeds["prefix_logits"] = model(input_ids=ids, attention_mask=mask, decoder_input_ids=prefix).logits.numpy()
    np.savez(output / "feeds.npz", **feeds)
    if model.config.model_type == "transformer_seq2seq":  # CTranslate2 has no recurrent decoder
        subprocess.run([sys.executable, "-m", "encdec", "export", "--model", str(model_dir), "--format",
                        "ctranslate2", "--output", str(output / "ct2"), "--overwrite"], check=True,
                       capture_output=True)
    plan["model_dir"] = str(model_dir)
    (output / "plan.json").write_text(json.dumps({**plan, "schemes": ["float32", *INT8_SCHEMES]}, indent=1))
    print(f"prepared {output}")


def check(folder: Path) -> dict:
    """Per scheme: the largest |difference| from torch's encoder outputs and first-step logits, as a share of the
    range of torch's (``relative``), with ONNX Runtime's AVX2 kernels where the CPU (or QEMU) has no AVX-512."""
    plan = json.loads((folder / "plan.json").read_text())
    feeds = dict(np.load(folder / "feeds.npz"))
    results = {}
    for scheme in plan["schemes"]:
        session = sessions(folder / scheme)
        outputs = session["encoder"].run(None, {"input_ids": feeds["input_ids"],
                                                "attention_mask": feeds["attention_mask"]})
        encoded = dict(zip(plan["encoder_outputs"], outputs, strict=True))
        decoder_feeds = {name: feeds[key] if kind == "feed" else encoded[key]
                         for name, (kind, key) in plan["decoder"].items()}
        logits = dict(zip(plan["decoder_outputs"], session["decoder"].run(None, decoder_feeds), strict=True))
        logits = logits["logits"][:, 0]
        encoder_diff = max(float(np.abs(encoded[name] - feeds[f"encoded.{name}"]).max() /
                                 np.ptp(feeds[f"encoded.{name}"])) for name in plan["encoder_outputs"])
        logits_diff = float(np.abs(logits - feeds["logits"]).max() / np.ptp(feeds["logits"]))
        argmax = float((logits.argmax(-1) == feeds["logits"].argmax(-1)).mean())
        results[scheme] = {"encoder_relative": encoder_diff, "logits_relative": logits_diff, "argmax_equal": argmax}
        print(f"{scheme:22s} encoder {encoder_diff:.4f}  logits {logits_diff:.4f}  (x torch's range; the export "
              f"accepts 0.1)  first token as torch's: {argmax:.0%}", flush=True)
    return results


def sessions(folder: Path) -> dict:
    """``encoder`` and ``decoder`` -> an ONNX Runtime session (one thread) over the graph of the export ``folder``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    return {name: ort.InferenceSession(str(folder / f"{name}_model{suffix}.onnx"), options,
                                       providers=["CPUExecutionProvider"])
            for name, suffix in (("encoder", ""), ("decoder", "_merged"))}


def speed(folder: Path, batch: int = 32, length: int = 20, steps: int = 10, rounds: int = 21) -> dict:
    """Per scheme, the median time of the encoder over ``batch`` random sources of ``length`` tokens and ``steps``
    greedy decoder steps after the first (the past growing), the schemes alternating over ``rounds``; and its ratio
    to float32's. A Transformer's export (its state starts empty)."""
    plan = json.loads((folder / "plan.json").read_text())
    feeds = dict(np.load(folder / "feeds.npz"))
    ids = np.random.default_rng(0).integers(4, int(feeds["logits"].shape[-1]), (batch, length))
    mask = np.ones_like(ids)
    runs = {scheme: sessions(folder / scheme) for scheme in plan["schemes"]}

    def decode(session: dict) -> None:
        encoded = dict(zip(plan["encoder_outputs"], session["encoder"].run(
            None, {"input_ids": ids, "attention_mask": mask}), strict=True))
        inputs = {"input_ids": np.full((batch, 1), int(feeds["start"][0, 0])), "encoder_attention_mask": mask}
        for name, (kind, key) in plan["decoder"].items():
            if name not in inputs:
                inputs[name] = encoded[key] if kind == "encoded" else np.zeros((batch, *feeds[key].shape[1:]),
                                                                              np.float32)
        for _ in range(steps + 1):
            out = dict(zip(plan["decoder_outputs"], session["decoder"].run(None, inputs), strict=True))
            inputs.update({"input_ids": out["logits"][:, -1:].argmax(-1)},
                          **{name: out[name.replace("past.", "present.", 1)] for name in inputs
                             if name.startswith("past.")})

    times: dict[str, list[float]] = {scheme: [] for scheme in runs}
    for index in range(rounds):
        for scheme in runs if index % 2 == 0 else list(reversed(runs)):
            start = time.perf_counter()
            decode(runs[scheme])
            times[scheme].append(time.perf_counter() - start)
    base = statistics.median(times["float32"])
    results = {scheme: {"ms": 1000 * statistics.median(seconds), "x_float32": statistics.median(seconds) / base}
               for scheme, seconds in times.items()}
    for scheme, figures in results.items():
        print(f"{scheme:22s} {figures['ms']:7.1f} ms  {figures['x_float32']:.2f} x float32's time", flush=True)
    return results


def engines(folder: Path) -> dict:
    """torch's and CTranslate2's int8 against their float32, teacher forced over the same batch: the largest
    |difference| of torch's logits and of CTranslate2's token log-probabilities, as a share of the range of the
    float32 values (CTranslate2: the Transformer's export only)."""
    import torch

    from encdec.inference import load_model_and_tokenizer
    from encdec.inference.engines import quantize_int8

    plan = json.loads((folder / "plan.json").read_text())
    feeds = dict(np.load(folder / "feeds.npz"))
    torch.set_num_threads(1)
    model, tokenizer = load_model_and_tokenizer(plan["model_dir"])
    inputs = {name: torch.from_numpy(feeds[key]) for name, key in
              (("input_ids", "input_ids"), ("attention_mask", "attention_mask"), ("decoder_input_ids", "prefix"))}
    with torch.no_grad():
        reference = model(**inputs).logits.numpy()
        int8 = quantize_int8(model)(**inputs).logits.numpy()
    results = {"torch": relative(int8, reference)}
    if (folder / "ct2").is_dir():
        results["ctranslate2"] = ct2_scores(folder / "ct2", tokenizer, feeds)
    for engine, figures in results.items():
        print(f"{engine:12s} int8 vs float32: {figures['relative']:.4f} x the range of float32's "
              f"({figures['largest']:.3g} largest)", flush=True)
    return results


def ct2_scores(export: Path, tokenizer, feeds: dict) -> dict:
    """CTranslate2's token log-probabilities of the prefix (after the start token), float32 against int8."""
    import ctranslate2

    sources = [tokenizer.convert_ids_to_tokens([int(i) for i, m in zip(row, mask, strict=True) if m])
               for row, mask in zip(feeds["input_ids"], feeds["attention_mask"], strict=True)]
    targets = [tokenizer.convert_ids_to_tokens([int(i) for i in row[1:]]) for row in feeds["prefix"]]
    scores = {}
    for compute_type in ("float32", "int8"):
        translator = ctranslate2.Translator(str(export), device="cpu", compute_type=compute_type, intra_threads=1)
        scores[compute_type] = np.array([result.log_probs for result in translator.score_batch(sources, targets)])
    return relative(scores["int8"], scores["float32"])


def relative(values: np.ndarray, reference: np.ndarray) -> dict:
    largest = float(np.abs(values - reference).max())
    return {"largest": largest, "relative": largest / float(np.ptp(reference))}


def cpu_flags() -> str:
    """The vector extensions the CPU reports to CPUID, as numpy detects them (under QEMU: the emulated model's;
    /proc/cpuinfo would show the host's)."""
    from numpy._core._multiarray_umath import __cpu_features__

    return " ".join(name for name, found in __cpu_features__.items() if found and name.startswith(("AVX", "AMX")))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    prepared = commands.add_parser("prepare")
    prepared.add_argument("--model", required=True, type=Path)
    prepared.add_argument("--output", required=True, type=Path)
    checked = commands.add_parser("check")
    checked.add_argument("folder", type=Path)
    compared = commands.add_parser("engines")
    compared.add_argument("folder", type=Path)
    timed = commands.add_parser("speed")
    timed.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.model, args.output)
        return
    print(f"CPU flags: {cpu_flags() or 'no AVX'}", flush=True)
    results = {"check": check, "engines": engines, "speed": speed}[args.command](args.folder)
    print(json.dumps({"cpu_flags": cpu_flags(), "results": results}))


if __name__ == "__main__":
    main(sys.argv[1:])
