"""Shipping: translate_lines, the model card (templates, metadata, model-index), the folder check (the exact upload
list, corrupt or missing files) and the push, with the Hub's network calls replaced by a capture; and what users ship
(a folder from ``encdec train``, and the files ``encdec push`` uploads from it) loading where encdec is not installed,
in another process (remote_code.py says why an in-process load cannot show it)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from huggingface_hub import CommitOperationAdd, HfApi, ModelCard
from transformers import AutoModelForSeq2SeqLM

import encdec
from encdec.cards import card_template, render_model_card, write_model_card
from encdec.errors import EncdecError, InputFileError, OverwriteError
from encdec.folders import check_model_folder, model_identity, refuse_model_overwrite, save_for_pipeline
from encdec.inference import load_pipeline, translate_lines
from encdec.ship.hub import push_model
from encdec_cli import main
from remote_code import assert_same_as_encdec, load_without_encdec
from tiny_model_folders import FAMILIES, date_tokenizer, save_folder, write_tiny_run_config
from toy import TINY_MODELS, folder_model

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(encdec.__file__).parent
MODEL_TYPES = {"transformer": "transformer_seq2seq", "rnn": "rnn_seq2seq"}
METRICS = {"bleu": 31.4159, "chrf": 55.5, "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2",
           "split": "test"}


@pytest.fixture(scope="module")
def tokenizer():
    return date_tokenizer()


@pytest.fixture(scope="module")
def folders(tokenizer, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hub-folders")
    return {family: save_for_pipeline(folder_model(family, tokenizer), tokenizer, root / family) for family in FAMILIES}


@pytest.fixture
def copy_of(folders, tmp_path):
    """``copy_of(family)``: a private copy of a saved folder, for tests that change it."""
    return lambda family: Path(shutil.copytree(folders[family], tmp_path / family))


# What a folder of each family uploads, written out: a test that derived it from the package's sources the way
# check_model_folder does would agree with any mistake in that derivation. Sorted, as check_model_folder returns it:
# the fixed files (config, generation defaults, weights, tokenizer), the card, and the code that trust_remote_code
# loading imports (the modeling and configuration files, their single-dot siblings and the pipeline).
UPLOAD = {
    "transformer": ["README.md", "attention.py", "compat.py", "config.json", "configuration_seq2seq.py",
                    "configuration_transformer_seq2seq.py", "generation_config.json", "model.safetensors",
                    "modeling_transformer_seq2seq.py", "pipeline_seq2seq.py", "seq2seq_utils.py", "tokenizer.json",
                    "tokenizer_config.json", "validation.py"],
    "rnn": ["README.md", "attention.py", "compat.py", "config.json", "configuration_rnn_seq2seq.py",
            "configuration_seq2seq.py", "generation_config.json", "model.safetensors", "modeling_rnn_seq2seq.py",
            "pipeline_seq2seq.py", "rnn_cache.py", "rnn_steps.py", "seq2seq_utils.py", "tokenizer.json",
            "tokenizer_config.json", "validation.py"],
}
# What a model folder may hold besides and must never upload: training state (checkpoints with optimizer and
# scheduler states, weight snapshots, the unfinished final save), the tokenizer's own copy, scores, interrupted
# translations (OUTPUT.partial and its record), logs, plots and Python files that remote loading does not import.
NEVER_UPLOADED = ["checkpoints/checkpoint-10/optimizer.pt", "checkpoints/checkpoint-10/model.safetensors",
                  "checkpoints/checkpoint-10/scheduler.pt", "checkpoints/snapshots/step-10.safetensors",
                  ".final-tmp/model.safetensors", "tokenizer/tokenizer.json", "eval_results.json",
                  "training_args.bin", "test.hyp", "test.hyp.partial", "test.hyp.partial.json", "train.log",
                  "runs/events.out.tfevents.1", "attention.png", "unused_helper.py"]


def without_card(family: str) -> list[str]:
    """``UPLOAD[family]`` for a folder that has no README.md yet (save_for_pipeline writes none)."""
    return [name for name in UPLOAD[family] if name != "README.md"]


def add_leftovers(folder: Path) -> None:
    """Write every ``NEVER_UPLOADED`` file into ``folder``."""
    for name in NEVER_UPLOADED:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"x")


# --- translate_lines -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_translate_lines_keeps_order_and_blank_lines(folders, family: str) -> None:
    lines = ["3rd of March 2021", "", "1/2/2000\n", "   ", "Wednesday, 3 Mar 2021"]
    outputs = translate_lines(folders[family], lines, batch_size=2, max_new_tokens=5)
    pipe = load_pipeline(folders[family], device="cpu")
    expected = [pipe(line.strip(), max_new_tokens=5)[0]["generated_text"] if line.strip() else "" for line in lines]
    assert outputs == expected
    assert translate_lines(pipe, lines, batch_size=3, max_new_tokens=5) == expected  # a pipeline works as well
    assert translate_lines(pipe, []) == []


def test_translate_lines_refuses_several_outputs_per_line(folders) -> None:
    with pytest.raises(EncdecError, match="translate_n_best"):
        translate_lines(folders["rnn"], ["1/2/2000"], num_beams=2, num_return_sequences=2)


def test_translate_lines_names_a_missing_folder(tmp_path) -> None:
    with pytest.raises(InputFileError, match="nowhere"):
        translate_lines(tmp_path / "nowhere", ["1/2/2000"])


# --- model card ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model_type", MODEL_TYPES.values())
def test_the_templates_are_package_data_kept_once(model_type: str) -> None:
    packaged = PACKAGE / "model_cards" / f"{model_type}.md"
    assert card_template(model_type) == packaged.read_text(encoding="utf-8")
    tracked = ("model_cards", "src", "docs")
    copies = [path for folder in tracked for path in (REPO_ROOT / folder).rglob(f"{model_type}.md")]
    assert copies == [packaged], f"one template per family, in src/encdec/model_cards/; found {copies}"


@pytest.mark.parametrize("family", FAMILIES)
def test_card_metadata_and_model_index(folders, family: str) -> None:
    text = render_model_card(folders[family], dataset_name="Dates (built-in)", dataset_id="someone/dates",
                             metrics=METRICS, training_summary={"steps": 800, "train_loss": 1.234567},
                             repo_id="someone/dates-" + family)
    card = ModelCard(text)
    data = card.data
    assert data.license == "apache-2.0"
    assert data.library_name == "transformers"
    assert data.pipeline_tag == "translation"
    assert data.tags == ["translation", "seq2seq", "encdec", MODEL_TYPES[family]]
    assert data.datasets == ["someone/dates"]
    assert data.model_name == "dates-" + family
    results = {result.metric_type: result for result in data.eval_results}
    assert set(results) == {"bleu", "chrf"}
    assert results["bleu"].metric_value == 31.42 and results["chrf"].metric_value == 55.5
    assert {(r.task_type, r.dataset_type, r.dataset_name, r.dataset_split) for r in results.values()} == {
        ("translation", "someone/dates", "Dates (built-in)", "test")}
    assert "model-index" in text.split("---")[1]
    usage = ('model_id = "someone/dates-', "AutoModelForSeq2SeqLM.from_pretrained(model_id, trust_remote_code=True)",
             "pipeline(model=model_id, trust_remote_code=True)")
    scores_row = "| - | 31.42 | - | 55.5 |"  # decoding, BLEU, lowercased BLEU, chrF
    for snippet in (*usage, scores_row, METRICS["bleu_signature"], "| train_loss | 1.235 |", "## Limitations"):
        assert snippet in card.text, snippet


def test_card_describes_the_architecture(folders, tokenizer) -> None:
    transformer = render_model_card(folders["transformer"])
    model = AutoModelForSeq2SeqLM.from_pretrained(folders["transformer"])
    assert f"| Parameters | {model.num_parameters():,} (" in transformer
    assert "| Model width `d_model` | 16 |" in transformer
    assert "| Attention heads `h` | 2 encoder, 2 decoder (`d_k` = 8) |" in transformer
    assert "| Layers | 1 encoder, 2 decoder |" in transformer
    rnn = render_model_card(folder_model("rnn", tokenizer, cell_type="gru", attention="luong_general"))
    assert "| Cell | GRU |" in rnn
    assert "general score" in rnn and "input feeding" in rnn
    assert "| Decoder | 1 layer(s), hidden size 16 |" in rnn
    assert "Cho et al." not in rnn
    baseline = render_model_card(folder_model("rnn", tokenizer, attention="none", context_feeding=True))
    assert ("| Attention | none: one fixed source summary starts the decoder and feeds every decoder step and the "
            "readout (Cho et al. 2014) |") in baseline


def test_card_without_metrics_has_no_model_index(folders) -> None:
    text = render_model_card(folders["rnn"])
    card = ModelCard(text)
    assert card.data.eval_results is None
    assert "model-index" not in text
    assert "Not evaluated yet." in text and "PATH_OR_REPO_ID" in text


def test_card_refuses_a_wrong_family_and_metrics_without_data(folders) -> None:
    with pytest.raises(EncdecError, match="family"):
        render_model_card(folders["rnn"], family="transformer_seq2seq")
    with pytest.raises(EncdecError, match="dataset_name"):
        render_model_card(folders["rnn"], metrics=METRICS)


def test_write_model_card_does_not_overwrite_without_consent(copy_of) -> None:
    folder = copy_of("transformer")
    path = write_model_card(folder, repo_id="someone/x")
    assert path == folder / "README.md" and ModelCard.load(path).data.model_name == "x"
    with pytest.raises(OverwriteError, match="overwrite"):
        write_model_card(folder)
    write_model_card(folder, overwrite=True, repo_id="someone/y")
    assert ModelCard.load(path).data.model_name == "y"


# --- folder checks ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_check_lists_exactly_the_files_to_upload(copy_of, family: str) -> None:
    folder = copy_of(family)
    assert check_model_folder(folder) == without_card(family)
    add_leftovers(folder)
    write_model_card(folder)
    assert check_model_folder(folder) == UPLOAD[family]
    assert all((folder / name).is_file() for name in NEVER_UPLOADED)  # there, and not listed


@pytest.mark.parametrize("damage", ["missing", "garbage", "truncated", "empty"])
def test_unreadable_weights_name_the_file_and_the_fix(copy_of, damage: str) -> None:
    weights = copy_of("rnn") / "model.safetensors"
    if damage == "missing":
        weights.unlink()
    elif damage == "garbage":
        weights.write_bytes(b"\x00\x01 not a safetensors file" * 10)
    elif damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:-100])
    else:
        weights.write_bytes(b"")
    with pytest.raises(InputFileError, match=r"model\.safetensors.*save_for_pipeline"):
        check_model_folder(weights.parent)


def test_check_names_what_remote_loading_would_miss(copy_of, tokenizer, tmp_path) -> None:
    plain = save_folder(folder_model("transformer", tokenizer), tokenizer, tmp_path / "plain")  # save_pretrained only
    with pytest.raises(InputFileError, match="custom_pipelines.*save_for_pipeline"):
        check_model_folder(plain)
    folder = copy_of("transformer")
    (folder / "README.md").write_text("---\nlicense: [unclosed\n---\n# card\n")
    with pytest.raises(InputFileError, match="README.md"):
        check_model_folder(folder)
    (folder / "README.md").unlink()
    (folder / "attention.py").unlink()  # imported by the modeling file
    with pytest.raises(InputFileError, match="attention.py"):
        check_model_folder(folder)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(InputFileError, match="tokenizer.json"):
        check_model_folder(folder)
    with pytest.raises(InputFileError, match="does not exist"):
        check_model_folder(tmp_path / "nowhere")


def test_model_identity_changes_with_what_decides_translations_only(copy_of, tmp_path) -> None:
    """Is this the same model? Scores, a card and a new file written beside the model leave the answer unchanged;
    a changed weight, generation default or recorded alignment layer changes it, named by its file. A copy elsewhere
    has the same files but another path."""
    folder = copy_of("transformer")
    before = model_identity(folder)
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= before.keys()
    assert not {name for name in before if name.endswith(".py")}
    write_model_card(folder)
    for name in ("eval_results.json", "averaging.json", "test2016-beam5.json"):
        (folder / name).write_text("{}")
    assert model_identity(folder) == before
    copy = shutil.copytree(folder, tmp_path / "copy")
    assert {**model_identity(copy), "path": before["path"]} == before
    for name, content in (("generation_config.json", b'{"num_beams": 7}'), ("alignment.json", b'{"layer": 0}')):
        (folder / name).write_bytes(content)
        changed = model_identity(folder)
        assert changed[name] != before.get(name), name
        before = changed
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    assert model_identity(folder)["model.safetensors"] != before["model.safetensors"]


def test_outputs_may_go_beside_a_model_but_not_over_one_of_its_files(copy_of) -> None:
    folder = copy_of("rnn")
    refuse_model_overwrite(folder / "test2016-beam5.json", [folder])
    for name in ("config.json", "model.safetensors", "tokenizer.json", "vocab.json", "alignment.json",
                 "eval_results.json", "README.md", "modeling_rnn_seq2seq.py", "plots/attention.png"):
        with pytest.raises(OverwriteError, match="is part of the model"):
            refuse_model_overwrite(folder / name, [folder])
    with pytest.raises(OverwriteError, match="is the input"):
        refuse_model_overwrite(folder, [folder])


# --- push ------------------------------------------------------------------------------------------------------

@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    """Replace the two network calls of ``push_model`` (``HfApi.create_repo`` and ``HfApi.create_commit``): record
    the calls and write every uploaded file into ``hub.folder(repo_id)``, as the Hub would store the repository
    (named ``owner--name``, so that each repository's folder has a name of its own)."""
    hub = SimpleNamespace(root=tmp_path / "hub", repos=[], commits=[])
    hub.folder = lambda repo_id: hub.root / repo_id.replace("/", "--")

    def create_repo(self, repo_id, *, private=None, exist_ok=False, **kwargs):
        hub.repos.append({"repo_id": repo_id, "private": private, "exist_ok": exist_ok})
        return SimpleNamespace(repo_id=repo_id)

    def create_commit(self, repo_id, operations, *, commit_message, **kwargs):
        assert all(isinstance(op, CommitOperationAdd) for op in operations), operations
        hub.commits.append({"repo_id": repo_id, "message": commit_message,
                            "files": sorted(op.path_in_repo for op in operations)})
        for op in operations:
            target = hub.folder(repo_id) / op.path_in_repo
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(op.path_or_fileobj, target)
        return SimpleNamespace(commit_url=f"https://huggingface.co/{repo_id}/commit/0123")

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    return hub


def uploaded(hub: SimpleNamespace, repo_id: str) -> list[str]:
    """Every file under the fake Hub's repository folder, as paths relative to it."""
    folder = hub.folder(repo_id)
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())


@pytest.mark.parametrize("family", FAMILIES)
def test_push_uploads_the_checked_folder_in_one_commit(copy_of, fake_hub, family: str) -> None:
    folder = copy_of(family)
    add_leftovers(folder)  # must stay home
    repo_id = "someone/dates-" + family
    url = push_model(folder, repo_id, private=True, commit_message="first")
    assert url == f"https://huggingface.co/someone/dates-{family}/commit/0123"
    assert fake_hub.repos == [{"repo_id": repo_id, "private": True, "exist_ok": True}]
    expected = UPLOAD[family]  # with README.md: the card was written, since there was none
    assert fake_hub.commits == [{"repo_id": repo_id, "message": "first", "files": expected}]
    assert uploaded(fake_hub, repo_id) == expected
    assert all((fake_hub.folder(repo_id) / name).read_bytes() == (folder / name).read_bytes() for name in expected)

    card = ModelCard.load(fake_hub.folder(repo_id) / "README.md")
    assert card.data.tags == ["translation", "seq2seq", "encdec", MODEL_TYPES[family]]
    assert 'model_id = "someone/dates-' + family + '"' in card.text


def test_push_keeps_an_existing_card_and_stops_on_a_bad_folder(copy_of, fake_hub) -> None:
    folder = copy_of("transformer")
    write_model_card(folder, dataset_name="Dates", metrics=METRICS)
    card = (folder / "README.md").read_text()
    push_model(folder, "someone/dates")
    assert (fake_hub.folder("someone/dates") / "README.md").read_text() == card
    (folder / "model.safetensors").write_bytes(b"corrupt")
    with pytest.raises(InputFileError, match="model.safetensors"):
        push_model(folder, "someone/dates")
    assert len(fake_hub.commits) == 1  # nothing was sent for the bad folder


# --- what users ship runs where encdec is not installed ------------------------------------------------------------

SOURCES = ["3rd of March 2021", "1/2/2000", "Wednesday, 3 Mar 2021"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """``encdec train`` once per family: the tiny models of toy.py for 2 steps on 64 built-in date pairs (a second),
    evaluated and checkpointed at each step, so that the folder holds what a real run leaves beside the model.
    Shared: tests copy a folder before they change it."""
    root = tmp_path_factory.mktemp("hub-train")
    folders = {}
    for family in FAMILIES:
        folders[family] = root / f"trained-{family}"
        config = write_tiny_run_config(root / "configs" / f"{family}.yaml", family, TINY_MODELS[family], {
            "data": {"builtin_train": 64, "builtin_validation": 8, "builtin_test": 8},
            "tokenizer": {"vocab_size": 120, "min_frequency": 1},
            "training": {"output_dir": str(folders[family]), "max_steps": 2, "eval_steps": 1,
                         "eval_strategy": "steps", "per_device_train_batch_size": 16,
                         "per_device_eval_batch_size": 16, "warmup_steps": 1, "logging_steps": 1,
                         "save_total_limit": 2, "report_to": "none"}})
        assert main(["train", str(config)]) == 0
    return folders


@pytest.mark.parametrize("family", FAMILIES)
def test_encdec_push_of_a_trained_folder_uploads_only_the_model(trained, fake_hub, tmp_path, family: str) -> None:
    """The folder ``encdec train`` wrote holds checkpoints (optimizer and scheduler states), the tokenizer's copy and
    the scores next to the model; ``encdec push`` uploads the model, its code and the trained card, nothing else."""
    folder = Path(shutil.copytree(trained[family], tmp_path / f"trained-{family}"))
    add_leftovers(folder)
    training_state = ["checkpoints/checkpoint-2/optimizer.pt", "checkpoints/checkpoint-2/scheduler.pt",
                      "checkpoints/checkpoint-2/model.safetensors", "tokenizer/tokenizer.json", "eval_results.json"]
    assert all((folder / name).is_file() for name in training_state)
    card = (folder / "README.md").read_bytes()
    repo_id = f"someone/pushed-{family}"
    assert main(["push", "--model", str(folder), "--repo-id", repo_id]) == 0
    assert [commit["files"] for commit in fake_hub.commits] == [UPLOAD[family]]
    assert uploaded(fake_hub, repo_id) == UPLOAD[family]
    assert (fake_hub.folder(repo_id) / "README.md").read_bytes() == card  # the trained card, with its scores


@pytest.mark.integration  # a fresh Python process, torch and transformers imported anew
def test_trained_and_pushed_folders_run_without_encdec(trained, fake_hub, tmp_path) -> None:
    """The promise of the model card (``trust_remote_code=True`` on a machine without encdec), checked on what users
    ship: the folders ``encdec train`` wrote and the files ``encdec push`` uploads from them, copied to folders of
    their own. In another process, where importing encdec fails, each loads through AutoConfig, AutoTokenizer,
    AutoModelForSeq2SeqLM and the pipeline from the folder's own code and gives exactly what encdec gives here."""
    for family in FAMILIES:
        assert main(["push", "--model", str(trained[family]), "--repo-id", f"someone/pushed-{family}"]) == 0
    pushed = {family: fake_hub.folder(f"someone/pushed-{family}") for family in FAMILIES}
    assert {family: uploaded(fake_hub, f"someone/pushed-{family}") for family in FAMILIES} == UPLOAD
    folders = [*trained.values(), *pushed.values()]
    remote = load_without_encdec(folders, SOURCES, tmp_path)
    for folder in folders:
        assert_same_as_encdec(remote[str(folder)], folder, SOURCES)
    for family in FAMILIES:  # the upload is the trained model, not just a model that loads
        assert remote[str(pushed[family])]["generated"] == remote[str(trained[family])]["generated"]
