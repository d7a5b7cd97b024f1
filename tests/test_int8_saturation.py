"""int8 ONNX exports that are right on every CPU ONNX Runtime runs on, shown on any CPU.

x86 CPUs without VNNI (AVX2 only, or AVX-512 before Cascade Lake) run ONNX Runtime's U8S8 products (uint8 activations
times int8 weights) with ``vpmaddubsw``: two adjacent products added into an int16 that saturates. VNNI, ARM and
WebAssembly kernels add in int32. ``avx2_u8s8`` emulates the former in numpy; the tests run it on every integer
weight of an exported graph, with activations chosen to reach the bound (255 wherever one sign of weight is) and
random ones, and ask for the exact int32 products, as a CPU with VNNI computes them. The export's weights pass;
full-range U8S8 weights (the scheme before) saturate, the export finds them and refuses them.

Random tiny models over the toy vocabulary: random weights spread over their channel's whole range, as trained
ones do (quantization gives the largest of each channel 127 in full range). The CPU classes the int8 notes are for
follow the CPU's flags, and CTranslate2's int8, which does saturate there, says so on x86 without VNNI."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from encdec.folders import save_for_pipeline
from encdec.inference import load_engine
from encdec.inference.engines import int8 as int8_notes
from encdec.inference.engines import onnxruntime_engine
from encdec.inference.engines.int8 import CPU_CLASSES, classify_cpu, cpu_class, saturation_note
from encdec.inference.engines.onnx_layout import DECODER_FILE, ENCODER_FILE, MANIFEST, read_layout
from encdec.ship import onnx_export
from encdec.ship.ctranslate2_export import export_ctranslate2
from encdec.ship.onnx_export import (
    INT8_SCHEMES,
    ExportCheckFailed,
    export_onnx,
    quantize_graphs,
    saturating_weights,
)
from toy import RNN_VARIANTS, TEST_TRANSFORMER, TOY_IDS, VARIANT_RNN, digit_tokenizer, tiny_model

CONFIGS = {"transformer": TEST_TRANSFORMER, "lstm": {**VARIANT_RNN, **RNN_VARIANTS["bahdanau-lstm"]}}
# the integer ops of a dynamically quantized graph: the input index of each weight, and the axis summed over
WEIGHTS = {"MatMulInteger": ((1, 0),), "DynamicQuantizeLSTM": ((1, 1), (2, 1))}


def avx2_u8s8(activations: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(M, K) uint8 x (K, N) int8 -> (M, N) int32 as x86 without VNNI computes it: the products of K positions 2i and
    2i + 1 added into a saturating int16 (``vpmaddubsw``), those sums added in int32 (``vpmaddwd`` by ones)."""
    a, w = activations.astype(np.int32), weights.astype(np.int32)
    if a.shape[1] % 2:  # the kernels pad K with zeros
        a, w = np.pad(a, ((0, 0), (0, 1))), np.pad(w, ((0, 1), (0, 0)))
    products = a[:, :, None] * w[None]  # (M, K, N)
    return np.clip(products[:, 0::2] + products[:, 1::2], -32768, 32767).sum(axis=1)


def integer_weights(path) -> dict[str, np.ndarray]:
    """name -> each int8 weight of an integer op of the graph at ``path``, as (K, N): K the axis summed over."""
    graph = onnx.load(str(path)).graph
    initializers = {tensor.name: numpy_helper.to_array(tensor) for tensor in graph.initializer}
    found = {}
    for node in graph.node:
        for index, axis in WEIGHTS.get(node.op_type, ()):
            weights = initializers[node.input[index]]
            for direction, matrix in enumerate(weights if axis == 1 else [weights]):  # LSTM: one per direction
                found[f"{node.input[index]}[{direction}]"] = matrix
    return found


def saturated(weights: np.ndarray) -> bool:
    """Whether the emulation differs from the exact products for activations that reach the bound (255 wherever
    a channel's weights are positive, or negative) or random ones."""
    if weights.dtype != np.int8:  # U8U8: the kernels widen unsigned weights to 16 bits, never this pairing
        return False
    rng = np.random.default_rng(0)
    activations = np.concatenate([np.where(weights.T > 0, 255, 0), np.where(weights.T < 0, 255, 0),
                                  rng.integers(0, 256, (8, weights.shape[0]))]).astype(np.uint8)
    return not np.array_equal(avx2_u8s8(activations, weights), activations.astype(np.int32) @ weights.astype(np.int32))


@pytest.fixture(scope="module")
def float32_exports(tmp_path_factory):
    """family -> a float32 export of a random tiny model."""
    root, tokenizer = tmp_path_factory.mktemp("int8"), digit_tokenizer()
    return {name: export_onnx(save_for_pipeline(tiny_model(config, **{**TOY_IDS, "vocab_size": len(tokenizer)}),
                                                tokenizer, root / name), root / f"{name}-onnx")
            for name, config in CONFIGS.items()}


def quantized(folder, scheme: str, tmp_path):
    """A copy of the float32 export ``folder`` quantized with ``INT8_SCHEMES[scheme]``."""
    copy = tmp_path / scheme
    copy.mkdir()
    for file in (ENCODER_FILE, DECODER_FILE):
        (copy / file).write_bytes((folder / file).read_bytes())
    quantize_graphs(copy, read_layout(folder), INT8_SCHEMES[scheme])
    return copy


def test_the_emulation_saturates_where_int16_overflows() -> None:
    weights = np.array([[127, 10], [127, -120], [1, 64], [0, 64]], np.int8)  # (K 4, N 2)
    activations = np.array([[255, 255, 255, 255], [1, 2, 3, 4]], np.uint8)
    exact = activations.astype(np.int32) @ weights.astype(np.int32)
    assert avx2_u8s8(activations, weights)[0, 0] == 32767 + 255 != exact[0, 0]  # 255 x 254 > 32,767
    assert avx2_u8s8(activations, weights)[0, 1] == exact[0, 1]  # 255 x (10 - 120), 255 x 128 fit
    assert np.array_equal(avx2_u8s8(activations[1:], weights), exact[1:])


@pytest.mark.parametrize("family", list(CONFIGS))
def test_the_int8_export_computes_exact_products_without_vnni(family, float32_exports, tmp_path) -> None:
    """Every integer weight of the int8 export, emulated as x86 without VNNI computes, gives the exact products."""
    out = export_onnx(save_for_pipeline_of(float32_exports[family]), tmp_path / "int8", quantize="int8")
    for file in (ENCODER_FILE, DECODER_FILE):
        weights = integer_weights(out / file)
        assert weights, file
        assert [name for name, matrix in weights.items() if saturated(matrix)] == [], file
        assert saturating_weights(out / file) == [], file


def save_for_pipeline_of(export) -> str:
    """The model folder an export came from."""
    return read_layout(export).source_model["path"]


@pytest.mark.parametrize("family", list(CONFIGS))
def test_full_range_u8s8_saturates_and_is_found(family, float32_exports, tmp_path) -> None:
    """The scheme before (full-range int8 weights) saturates in the emulation, and ``saturating_weights`` names
    the same weights; U8S8 with 7-bit weights, per channel or not, never does. U8U8 leaves the LSTM's weights in
    full-range int8 (ONNX Runtime quantizes an LSTM's to int8 whatever the weight type), so only its MatMuls are
    safe."""
    for scheme in ("u8s8", "u8s8-7bit", "u8s8-7bit-per-tensor", "u8u8", "u8u8-per-tensor"):
        folder = quantized(float32_exports[family], scheme, tmp_path)
        for file in (ENCODER_FILE, DECODER_FILE):
            weights = integer_weights(folder / file)
            emulated = {name.rsplit("[", 1)[0] for name, matrix in weights.items() if saturated(matrix)}
            assert emulated == set(saturating_weights(folder / file)), (scheme, file)
            if scheme == "u8s8":
                assert emulated, file
            elif scheme.startswith("u8u8"):
                assert all(matrix.dtype == np.uint8 or "LSTM" in name for name, matrix in weights.items()), file
                assert bool(emulated) == (family == "lstm"), (scheme, file)
            else:
                assert not emulated, (scheme, file)


def test_the_export_refuses_weights_that_could_saturate(float32_exports, tmp_path, monkeypatch) -> None:
    original = onnx_export.quantize_graphs
    monkeypatch.setattr(onnx_export, "quantize_graphs",
                        lambda folder, layout: original(folder, layout, INT8_SCHEMES["u8s8"]))
    with pytest.raises(ExportCheckFailed, match=r"^The int8 export of encoder_model.onnx has weights \(.+ in all\) "
                                                r"whose products can overflow 16-bit sums on x86 CPUs without VNNI"):
        export_onnx(save_for_pipeline_of(float32_exports["transformer"]), tmp_path / "out", quantize="int8")
    assert not (tmp_path / "out").exists()


def test_the_cpu_class_follows_the_flags() -> None:
    flags = "flags\t\t: fpu sse sse2 avx avx2 fma"
    assert classify_cpu("x86_64", flags) == "x86-avx2"
    assert classify_cpu("x86_64", flags + " avx512f avx512bw avx512_vnni") == "x86-vnni"
    assert classify_cpu("x86_64", flags + " avx_vnni") == "x86-vnni"  # AVX-VNNI: Alder Lake and later, no AVX-512
    assert classify_cpu("aarch64", "Features\t: fp asimd asimddp") == "arm64"
    assert classify_cpu("x86_64", "flags\t\t: fpu sse sse2") == classify_cpu("riscv64", "") == "other"
    assert cpu_class() in CPU_CLASSES


def test_ctranslate2_int8_says_it_saturates_without_vnni() -> None:
    """CTranslate2's int8 adds u8 x s8 products in 16-bit pairs without VNNI (scripts/int8_without_vnni.py engines,
    under QEMU's Haswell); torch's (7-bit activations) and the ONNX export's (7-bit weights) do not."""
    note = saturation_note("ctranslate2", "x86-avx2")
    assert note == ("note: ctranslate2's int8 adds its products in saturating 16-bit pairs on x86-64 without VNNI "
                    "(AVX2) (its logits measured up to 0.27 x their range away from float32's): it computes in float32 "
                    "here, which is exact; see docs/fast-inference.md#int8-on-every-cpu")
    assert saturation_note("ctranslate2", "x86-vnni") is saturation_note("ctranslate2", "arm64") is None
    assert saturation_note("torch", "x86-avx2") is None


def test_ctranslate2_computes_in_float32_where_its_int8_saturates(float32_exports, tmp_path, monkeypatch,
                                                                    capsys) -> None:
    """int8 asked of CTranslate2 (``--quantize int8``, or an int8 export loaded as it is) computes in float32 on x86
    without VNNI, saying so in one line; in int8 on every other CPU class."""
    pytest.importorskip("ctranslate2")
    folder = save_for_pipeline_of(float32_exports["transformer"])
    exports = {kind: export_ctranslate2(folder, tmp_path / kind, quantization=kind) for kind in ("float32", "int8")}
    for cpu, in_float32 in (("x86-vnni", False), ("arm64", False), ("x86-avx2", True)):
        monkeypatch.setattr(int8_notes, "_int8_notes_said", set())
        monkeypatch.setattr(int8_notes, "cpu_class", lambda cpu=cpu: cpu)
        asked = load_engine(exports["float32"], "ctranslate2", quantize="int8")[0]
        stored = load_engine(exports["int8"], "ctranslate2")[0]
        assert [asked.precision == "float32", stored.precision == "float32"] == [in_float32, in_float32], cpu
        noted = saturation_note("ctranslate2", "x86-avx2") in capsys.readouterr().err.splitlines()
        assert noted == in_float32, cpu


def test_an_int8_export_before_7_bit_weights_is_noted_where_it_saturates(float32_exports, tmp_path, monkeypatch,
                                                                       capsys) -> None:
    """The manifest names the int8 weights; an int8 export without that (made before 7-bit weights) gets one line on
    x86 without VNNI, where its full-range weights saturate, and none elsewhere."""
    out = export_onnx(save_for_pipeline_of(float32_exports["transformer"]), tmp_path / "int8", quantize="int8")
    assert read_layout(out).check["int8_weights"] == "U8S8, 7-bit weights, per channel"
    manifest = json.loads((out / MANIFEST).read_text())
    del manifest["check"]["int8_weights"]
    (out / MANIFEST).write_text(json.dumps(manifest))
    monkeypatch.setattr(int8_notes, "_int8_notes_said", set())
    for cpu, noted in (("x86-vnni", False), ("arm64", False), ("x86-avx2", True)):
        monkeypatch.setattr(onnxruntime_engine, "cpu_class", lambda cpu=cpu: cpu)
        load_engine(out, "onnxruntime")
        err = capsys.readouterr().err
        assert (f"note: {out} holds full-range int8 weights (an export before 7-bit ones), whose products saturate "
                "on x86-64 without VNNI (AVX2): its outputs can be far from the model's; export it again with "
                "`encdec export --format onnx --quantize int8`" in err) == noted, (cpu, err)
