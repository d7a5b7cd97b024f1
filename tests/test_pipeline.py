"""The ``seq2seq-generation`` pipeline: registration on import, the output convention, batching with padding,
generate kwargs, both families, and loading a saved folder in a process that cannot import encdec."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, pipeline
from transformers.pipelines import PIPELINE_REGISTRY

import encdec
from encdec import Seq2SeqGenerationPipeline
from encdec.folders import save_for_pipeline
from remote_code import BLOCK_ENCDEC
from tiny_model_folders import FAMILIES, date_tokenizer
from toy import folder_model

SOURCES = ["3rd of March 2021", "1/2/2000", "Wednesday, 3 Mar 2021"]  # different lengths: batches get padded
PIPELINE_FILE = Path(encdec.__file__).parent / "models" / "pipeline_seq2seq.py"


@pytest.fixture(scope="module")
def tokenizer():
    return date_tokenizer()


def _input_dependent(model):
    """Random init makes these tiny models say the same thing for every input; noise makes the output depend on
    the input, so that padding and batching mistakes show."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return model


@pytest.fixture(scope="module")
def models(tokenizer) -> dict:
    return {family: _input_dependent(folder_model(family, tokenizer)) for family in FAMILIES}


@pytest.fixture(scope="module")
def folders(models, tokenizer, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pipeline-folders")
    return {family: save_for_pipeline(model, tokenizer, root / family) for family, model in models.items()}


def _pipe(models, tokenizer, family: str, **kwargs) -> Seq2SeqGenerationPipeline:
    return pipeline("seq2seq-generation", model=models[family], tokenizer=tokenizer, device="cpu", **kwargs)


def _direct(model, tokenizer, text: str | list[str], **generate_kwargs) -> list[str]:
    return tokenizer.batch_decode(_direct_ids(model, tokenizer, text, **generate_kwargs), skip_special_tokens=True)


def _direct_ids(model, tokenizer, text: str | list[str], **generate_kwargs) -> torch.Tensor:
    """``model.generate`` on ``text`` (for a list: one batch, padded as the pipeline pads it)."""
    batch = tokenizer([text] if isinstance(text, str) else text, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model.generate(**batch, **generate_kwargs)


def test_task_is_registered_on_import() -> None:
    _, task, _ = PIPELINE_REGISTRY.check_task("seq2seq-generation")
    assert task["impl"] is Seq2SeqGenerationPipeline
    assert task["pt"] == (AutoModelForSeq2SeqLM,)
    assert task["type"] == "text"


def test_pipeline_file_imports_only_stdlib_torch_and_transformers() -> None:
    tree = ast.parse(PIPELINE_FILE.read_text())
    nodes = list(ast.walk(tree))
    roots = {alias.name.split(".")[0] for node in nodes if isinstance(node, ast.Import) for alias in node.names}
    roots |= {node.module.split(".")[0] for node in nodes if isinstance(node, ast.ImportFrom) and node.module}
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in nodes)  # no relative imports
    assert roots <= {"__future__", "typing", "torch", "transformers"}


@pytest.mark.parametrize("family", FAMILIES)
def test_single_string_gives_one_dict_equal_to_generate(models, tokenizer, family: str) -> None:
    pipe = _pipe(models, tokenizer, family)
    assert isinstance(pipe, Seq2SeqGenerationPipeline)
    result = pipe(SOURCES[0], max_new_tokens=6)
    assert result == [{"generated_text": _direct(models[family], tokenizer, SOURCES[0], max_new_tokens=6)[0]}]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_padded_batch_equals_its_members_one_by_one(models, tokenizer, family: str) -> None:
    pipe = _pipe(models, tokenizer, family)
    one_by_one = [pipe(text, max_new_tokens=6)[0] for text in SOURCES]
    assert len({record["generated_text"] for record in one_by_one}) == len(SOURCES)  # the test can see a mix-up
    for batch_size in (1, 2, 3):  # 2: one padded batch plus a single; 3: one padded batch (right padding)
        assert pipe(SOURCES, batch_size=batch_size, max_new_tokens=6) == one_by_one  # a flat list of dicts
    assert pipe([]) == []


@pytest.mark.parametrize("family", FAMILIES)
def test_num_return_sequences_gives_lists_of_dicts(models, tokenizer, family: str) -> None:
    pipe = _pipe(models, tokenizer, family)
    single = pipe(SOURCES[0], num_beams=3, num_return_sequences=2, max_new_tokens=5)
    beams = _direct(models[family], tokenizer, SOURCES[0], num_beams=3, num_return_sequences=2, max_new_tokens=5)
    assert single == [{"generated_text": text} for text in beams]  # best beam first
    assert beams[0] == _direct(models[family], tokenizer, SOURCES[0], num_beams=3, max_new_tokens=5)[0]
    batched = pipe(SOURCES[:2], batch_size=2, num_beams=3, num_return_sequences=2, max_new_tokens=5)
    assert [len(per_input) for per_input in batched] == [2, 2]
    assert batched[0] == single


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_kwargs_pass_through(models, tokenizer, family: str) -> None:
    model = models[family]
    pipe = _pipe(models, tokenizer, family, max_new_tokens=2)  # init kwargs apply to every call
    ids = pipe(SOURCES[0], return_tensors=True)[0]["generated_token_ids"]
    assert ids.tolist() == _direct_ids(model, tokenizer, SOURCES[0], max_new_tokens=2)[0].tolist()
    ids = pipe(SOURCES[0], return_tensors=True, max_new_tokens=4)[0]["generated_token_ids"]  # the call wins
    four = _direct_ids(model, tokenizer, SOURCES[0], max_new_tokens=4)[0]
    assert ids.tolist() == four.tolist()
    assert len(four) == 1 + 4  # decoder start + max_new_tokens: no EOS before, so the limit was what stopped it
    # one string: a list goes through a DataLoader, which draws a seed from the global generator first
    sampling = dict(do_sample=True, top_k=20, temperature=3.0, max_new_tokens=8)
    torch.manual_seed(0)
    sampled = pipe(SOURCES[0], **sampling)
    torch.manual_seed(0)
    drawn = _direct(model, tokenizer, SOURCES[0], **sampling)
    assert sampled == [{"generated_text": drawn[0]}]  # the sampling settings reached generate()
    assert drawn != _direct(model, tokenizer, SOURCES[0], max_new_tokens=8)  # and sampling differs from greedy here
    with pytest.raises(ValueError, match="not_a_generate_kwarg"):  # unknown kwargs reach generate(), which refuses
        pipe(SOURCES[0], not_a_generate_kwarg=1)


def test_overlong_source_raises_the_models_error(tokenizer) -> None:
    model = folder_model("transformer", tokenizer, position_embedding_type="learned", max_position_embeddings=16)
    pipe = pipeline("seq2seq-generation", model=model, tokenizer=tokenizer, device="cpu")
    with pytest.raises(ValueError, match="max_position_embeddings"):
        pipe("Wednesday, 3 Mar 2021 " * 4, max_new_tokens=2)


@pytest.mark.parametrize("family", FAMILIES)
def test_saving_through_the_pipeline_writes_custom_pipelines(folders, family: str) -> None:
    config = json.loads((folders[family] / "config.json").read_text())
    assert config["custom_pipelines"] == {"seq2seq-generation": {
        "impl": "pipeline_seq2seq.Seq2SeqGenerationPipeline", "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}}
    assert (folders[family] / "pipeline_seq2seq.py").read_bytes() == PIPELINE_FILE.read_bytes()


REMOTE_SCRIPT = BLOCK_ENCDEC + textwrap.dedent(  # the package is installed here: the prelude hides it
    """
    import json
    from transformers import AutoTokenizer, pipeline

    result_path, sources, folders = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
    result = {}
    for folder in folders:
        inferred = pipeline(model=folder, trust_remote_code=True, device="cpu")  # the task comes from config.json
        named = pipeline("seq2seq-generation", model=folder, trust_remote_code=True, device="cpu")
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        result[folder] = {
            "task": inferred.task,
            "modules": [type(inferred).__module__, type(inferred.model).__module__, type(named).__module__],
            "inferred": inferred(sources, batch_size=3, max_new_tokens=6),
            "named": named(sources[0], num_beams=2, max_new_tokens=6),
            "tokens": tokenizer(sources[0])["input_ids"],
        }
    result["encdec_loaded"] = sorted(name for name, module in sys.modules.items()
                                     if module is not None and name.split(".")[0] in HIDDEN)
    json.dump(result, open(result_path, "w"))
    """
)


@pytest.mark.integration  # a fresh Python process, torch and transformers imported anew
def test_saved_folders_run_as_pipelines_without_encdec(folders, models, tokenizer, tmp_path) -> None:
    result_path = tmp_path / "result.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONPATH": ""}
    paths = [str(folders[family]) for family in FAMILIES]
    proc = subprocess.run([sys.executable, "-c", REMOTE_SCRIPT, str(result_path), json.dumps(SOURCES), *paths],
                          env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(result_path.read_text())
    assert result["encdec_loaded"] == []
    for family, path in zip(FAMILIES, paths, strict=True):
        got = result[path]
        assert got["task"] == "seq2seq-generation"
        assert all(module.startswith("transformers_modules.") for module in got["modules"]), got["modules"]
        pipe = _pipe(models, tokenizer, family)
        assert got["inferred"] == pipe(SOURCES, batch_size=3, max_new_tokens=6)
        assert got["named"] == pipe(SOURCES[0], num_beams=2, max_new_tokens=6)
        assert got["tokens"] == tokenizer(SOURCES[0])["input_ids"]
