"""Loading model folders as a machine without encdec does: in a fresh Python process where ``import encdec`` fails,
through the Auto classes and the pipeline with ``trust_remote_code=True``, offline.

Why another process: in the test process encdec is imported, and importing it registers both families with the Auto
classes. transformers then prefers the registered classes to a folder's code even with ``trust_remote_code=True``
(``auto_factory``: ``explicit_local_code``), so an in-process load runs encdec's installed modules and cannot see a
folder whose code files are missing, stale or import ``encdec``. Removing encdec from the path is not enough either:
the editable install puts ``src/`` on ``sys.path`` through a ``.pth`` file. So the child process first puts an import
hook in front of every other one that refuses ``encdec`` and ``encdec_cli`` (and their submodules), checks that the
imports really fail, and only then imports transformers.

``load_without_encdec`` runs that process on several folders at once (the interpreter and torch start once) and
returns what each folder's code produced; ``load_with_encdec`` produces the same record in this process with encdec's
own classes, and ``assert_same_as_encdec`` compares the two exactly and checks that each class came from the folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

HIDDEN = ("encdec", "encdec_cli")  # the package and the command-line package beside it (src/encdec_cli/)

# The child's first lines: from here on, importing encdec fails as it does where the package is not installed.
BLOCK_ENCDEC = textwrap.dedent(
    f"""
    import importlib.abc
    import sys

    HIDDEN = {HIDDEN!r}


    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HIDDEN:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None


    sys.meta_path.insert(0, NotInstalled())
    for hidden in HIDDEN:
        try:
            __import__(hidden)
        except ImportError:
            pass
        else:
            raise SystemExit(f"{{hidden}} is still importable: the test cannot run without it")
    """
)

# Loads each folder of the request as a user of the Hub would (config, tokenizer, model, pipeline), runs the
# request's generate calls and the pipeline, and writes what happened to the result file.
LOAD_FOLDERS = BLOCK_ENCDEC + textwrap.dedent(
    """
    import inspect
    import json

    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    torch.set_num_threads(1)  # as in the test process: the same kernels, so the same floating-point results
    request_path, result_path = sys.argv[1:3]
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    options = dict(trust_remote_code=True, local_files_only=True)
    results = {}
    for folder in request["folders"]:
        config = AutoConfig.from_pretrained(folder, **options)
        tokenizer = AutoTokenizer.from_pretrained(folder, **options)
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, **options).eval()
        # the task comes from config.json's custom_pipelines; pipeline() would hand local_files_only on to generate
        pipe = pipeline(model=folder, device="cpu", trust_remote_code=True)
        batch = tokenizer(request["sources"], padding=True, return_tensors="pt")
        with torch.no_grad():
            generated = {name: model.generate(**batch, **kwargs).tolist()
                         for name, kwargs in request["generate"].items()}
            logits = model(**batch, decoder_input_ids=torch.tensor(generated["greedy"])).logits
        results[folder] = {
            "classes": {role: [type(obj).__name__, type(obj).__module__, inspect.getfile(type(obj))]
                        for role, obj in (("config", config), ("model", model), ("pipeline", pipe))},
            "tokenizer_class": [type(tokenizer).__name__, type(tokenizer).__module__],
            "task": pipe.task,
            "input_ids": batch["input_ids"].tolist(),
            "generated": generated,
            "logits": logits.tolist(),
            "pipeline": pipe(request["sources"], batch_size=len(request["sources"]), **request["pipeline"]),
        }
    results["hidden_modules_loaded"] = sorted(name for name, module in sys.modules.items()
                                              if module is not None and name.split(".")[0] in HIDDEN)
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(results, f)
    """
)

GENERATE = {"greedy": {"max_new_tokens": 8, "num_beams": 1, "do_sample": False},
            "beam": {"max_new_tokens": 8, "num_beams": 3, "do_sample": False}}  # beam: the cache is reordered
PIPELINE = {"max_new_tokens": 8, "num_beams": 2}


def load_without_encdec(folders: Sequence[Path], sources: Sequence[str], work_dir: Path,
                        generate: Mapping[str, Mapping[str, Any]] = GENERATE,
                        pipeline_kwargs: Mapping[str, Any] = PIPELINE) -> dict[str, dict[str, Any]]:
    """What each of ``folders`` gives, loaded in a process that cannot import encdec: ``{str(folder): record}``
    (see ``load_with_encdec``). The folders' code is copied under ``work_dir/modules`` (``HF_MODULES_CACHE``), so
    no module cached by an earlier run is reused; the folder names must differ for the same reason."""
    names = [Path(folder).name for folder in folders]
    assert len(set(names)) == len(names), f"folder names must differ (transformers names modules by them): {names}"
    request_path, result_path = work_dir / "remote-request.json", work_dir / "remote-result.json"
    request = {"folders": [str(folder) for folder in folders], "sources": list(sources), "generate": dict(generate),
               "pipeline": dict(pipeline_kwargs)}
    request_path.write_text(json.dumps(request), encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(work_dir / "modules"), "PYTHONPATH": "",
           "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-c", LOAD_FOLDERS, str(request_path), str(result_path)], cwd=work_dir,
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(result_path.read_text(encoding="utf-8"))
    assert results.pop("hidden_modules_loaded") == []
    return results


@torch.no_grad()
def load_with_encdec(folder: Path, sources: Sequence[str], generate: Mapping[str, Mapping[str, Any]] = GENERATE,
                     pipeline_kwargs: Mapping[str, Any] = PIPELINE) -> dict[str, Any]:
    """The record ``load_without_encdec`` makes for ``folder``, made here with encdec's installed classes: the
    tokenizer's ``input_ids`` of ``sources``, the token ids of each ``generate`` call (``greedy`` among them), the
    logits of a forward pass on the greedy tokens and the pipeline's output."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    assert type(model).__module__.startswith("encdec.models."), type(model).__module__
    pipe = pipeline("seq2seq-generation", model=model, tokenizer=tokenizer, device="cpu")  # registered by encdec
    batch = tokenizer(list(sources), padding=True, return_tensors="pt")
    generated = {name: model.generate(**batch, **kwargs) for name, kwargs in generate.items()}
    return {"input_ids": batch["input_ids"].tolist(),
            "generated": {name: tokens.tolist() for name, tokens in generated.items()},
            "logits": model(**batch, decoder_input_ids=generated["greedy"]).logits,
            "pipeline": pipe(list(sources), batch_size=len(sources), **pipeline_kwargs)}


def assert_same_as_encdec(remote: Mapping[str, Any], folder: Path, sources: Sequence[str]) -> None:
    """``remote`` (one folder's record from ``load_without_encdec``) equals what encdec's classes give on ``folder``,
    token for token, and its config, model and pipeline classes ran from copies of ``folder``'s own code files."""
    model_type = json.loads((folder / "config.json").read_text(encoding="utf-8"))["model_type"]
    modeling, configuration = f"modeling_{model_type}.py", f"configuration_{model_type}.py"
    expected_files = {"config": configuration, "model": modeling, "pipeline": "pipeline_seq2seq.py"}
    for role, (_, module, path) in remote["classes"].items():
        assert module.startswith("transformers_modules."), (role, module)
        assert Path(path).name == expected_files[role], (role, path)
        assert Path(path).read_bytes() == (folder / expected_files[role]).read_bytes(), (role, path)
    assert remote["task"] == "seq2seq-generation"
    local = load_with_encdec(folder, sources)
    assert remote["input_ids"] == local["input_ids"]
    assert remote["generated"] == local["generated"]
    # the same computation in both processes (one thread each); the bound only absorbs kernel-order rounding
    torch.testing.assert_close(torch.tensor(remote["logits"]), local["logits"], rtol=0, atol=1e-6)
    assert remote["pipeline"] == local["pipeline"]
