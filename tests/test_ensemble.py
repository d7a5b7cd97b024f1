"""Ensembles (``encdec.inference.ensemble``): the members' mean log-probability at each step, decoded by ``generate()``.

The invariants: an ensemble of one model, and of two copies of it, decodes exactly as the model (greedy, beam,
n-best, sampling); the ensemble's step distribution is the mean of its members' log-probabilities; beam search with
the members' own caches equals beam search without caches, for a Transformer and an LSTM together; and members
with different tokenizers are refused in one line that names the difference. Then the CLI: several ``--model``
for ``translate`` and ``evaluate``, n-best lists with scores and alignments.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import sacrebleu
import torch
from transformers import GenerationMixin

from encdec import EnsembleForSeq2SeqLM
from encdec.errors import EncdecError
from encdec.folders import save_for_pipeline
from encdec.inference import load_ensemble, translate, translate_detailed
from encdec.inference.ensemble import check_same_tokenizer, tokenizer_difference
from encdec.tokenization import train_tokenizer
from encdec_cli import main
from tiny_model_folders import DATE_RNN, DATE_TRANSFORMER, date_data, train_on_dates

DECODINGS = {
    "greedy": {"num_beams": 1},
    "beam": {"num_beams": 4},
    "n-best": {"num_beams": 4, "num_return_sequences": 3},
    "sampling": {"do_sample": True, "top_k": 0},
}


@pytest.fixture(scope="module")
def dates():
    return date_data()


@pytest.fixture(scope="module")
def models(dates):
    """A Transformer and a Bahdanau LSTM, trained 150 steps on dates: their beams really compete (the models of
    conftest's ``pairs``, trained once a session)."""
    return {"transformer": train_on_dates(DATE_TRANSFORMER, dates, 150, 3e-3),
            "rnn": train_on_dates(DATE_RNN, dates, 150, 5e-3)}


@pytest.fixture(scope="module")
def folders(models, dates, tmp_path_factory):
    root = tmp_path_factory.mktemp("ensemble")
    return {family: save_for_pipeline(model, dates[0], root / family) for family, model in models.items()}


@pytest.fixture(scope="module")
def batch(dates):
    return dates[0]([source for source, _ in dates[2][:12]], padding=True, return_tensors="pt")


def log_linear_score(members, source_ids: list[int], target_ids: list[int]) -> float:
    """log P(target | source) under the members' log-linear ensemble, by hand from each member's own teacher-forced
    pass: at each target position the mean of the members' log-probabilities, renormalised (a softmax, as
    ``generate()`` and scoring take it), summed over the target tokens (</s> included)."""
    with torch.inference_mode():
        each = [member(input_ids=torch.tensor([source_ids]), labels=torch.tensor([target_ids])).logits[0]
                .log_softmax(-1) for member in members]  # (T, V) each
    combined = torch.stack(each).mean(dim=0).log_softmax(-1)
    return float(combined[torch.arange(len(target_ids)), torch.tensor(target_ids)].sum())


def generate(model, batch, options: dict, **extra):
    torch.manual_seed(7)  # the same draws for sampling
    with torch.inference_mode():
        return model.generate(**batch, max_new_tokens=16, return_dict_in_generate=True, output_scores=True,
                              **options, **extra)


@pytest.mark.parametrize("decoding", sorted(DECODINGS))
@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_an_ensemble_of_one_model_or_two_copies_decodes_as_the_model(models, batch, family, decoding) -> None:
    model, options = models[family], DECODINGS[decoding]
    alone = generate(model, batch, options)
    for members in ([model], [model, copy.deepcopy(model)]):
        ensemble = EnsembleForSeq2SeqLM(members).eval()
        together = generate(ensemble, batch, options)
        assert torch.equal(together.sequences, alone.sequences), (len(members), decoding)
        if "sequences_scores" in alone:
            torch.testing.assert_close(together.sequences_scores, alone.sequences_scores, atol=1e-5, rtol=0)
        # each step's scores are the model's log-probabilities (beam search) or logits up to a constant (greedy)
        for mine, theirs in zip(together.scores, alone.scores, strict=True):
            torch.testing.assert_close(mine.log_softmax(-1), theirs.log_softmax(-1), atol=1e-5, rtol=0)


def test_the_ensemble_scores_each_step_with_the_mean_of_its_members_log_probabilities(models, batch, dates) -> None:
    labels = dates[0](text_target=[target for _, target in dates[2][:12]], padding=True,
                      return_tensors="pt")["input_ids"]
    members = [models["transformer"], models["rnn"]]
    with torch.inference_mode():
        combined = EnsembleForSeq2SeqLM(members).eval()(**batch, labels=labels).logits
        each = [member(**batch, labels=labels).logits.log_softmax(-1) for member in members]
    torch.testing.assert_close(combined, (each[0] + each[1]) / 2)
    assert not torch.allclose(each[0], each[1], atol=1e-2)  # the members really differ, so the mean is new


@pytest.mark.parametrize("decoding", ["greedy", "beam", "n-best"])
def test_cached_decoding_equals_full_decoding_for_a_transformer_with_an_lstm(models, batch, decoding) -> None:
    """Each member keeps (and beam search reorders) its own cache: key/values for the Transformer, the recurrent
    state for the LSTM. Without caches every step re-reads the whole prefix; the outputs must be the same."""
    ensemble = EnsembleForSeq2SeqLM([models["transformer"], models["rnn"]]).eval()
    cached = generate(ensemble, batch, DECODINGS[decoding], use_cache=True)
    full = generate(ensemble, batch, DECODINGS[decoding], use_cache=False)
    assert torch.equal(cached.sequences, full.sequences)
    if "sequences_scores" in cached:
        torch.testing.assert_close(cached.sequences_scores, full.sequences_scores, atol=1e-5, rtol=1e-5)


def test_the_python_api_is_a_model_that_generate_and_translate_accept(folders, dates) -> None:
    ensemble, tokenizer = load_ensemble([folders["transformer"], folders["rnn"]])
    assert isinstance(ensemble, EnsembleForSeq2SeqLM) and isinstance(ensemble, GenerationMixin)
    assert ensemble.config.member_types == ["transformer_seq2seq", "rnn_seq2seq"]
    assert sum(p.numel() for p in ensemble.parameters()) == sum(
        p.numel() for member in ensemble.members for p in member.parameters())  # counted once
    sources = [source for source, _ in dates[2][:6]]
    texts = translate(ensemble, tokenizer, sources, num_beams=3, batch_size=4)
    one_by_one = [translate(ensemble, tokenizer, [source], num_beams=3)[0] for source in sources]
    assert texts == one_by_one  # a batch equals its members run one by one
    with pytest.raises(EncdecError, match="not saved as one model"):
        ensemble.save_pretrained("/tmp/never")


def test_members_with_different_tokenizers_are_refused_in_one_line(folders, dates, tmp_path) -> None:
    tokenizer = dates[0]
    texts = [text for pair in dates[1][:2000] for text in pair]
    other = train_tokenizer(list(reversed(texts)), vocab_size=len(tokenizer))  # same size, other merges
    assert len(other) == len(tokenizer) and tokenizer_difference(tokenizer, tokenizer) is None
    difference = tokenizer_difference(tokenizer, other)
    assert difference and difference.startswith(("vocabulary", "merges"))

    stranger = tmp_path / "stranger"
    save_for_pipeline(train_on_dates(DATE_TRANSFORMER, (other, dates[1], dates[2]), 1, 1e-3), other, stranger)
    with pytest.raises(EncdecError) as error:
        load_ensemble([folders["transformer"], stranger])
    message = str(error.value)
    assert "\n" not in message and str(stranger) in message and str(folders["transformer"]) in message
    assert difference in message and "share one tokenizer" in message
    smaller = train_tokenizer(texts, vocab_size=100)
    with pytest.raises(EncdecError, match=r"vocabulary size \(100 against"):
        check_same_tokenizer([tokenizer, smaller], ["a", "b"])


def test_members_with_different_vocabularies_are_refused(models) -> None:
    other = copy.deepcopy(models["transformer"])
    other.config.eos_token_id = other.config.eos_token_id + 1
    with pytest.raises(EncdecError, match="member 1 has eos_token_id="):
        EnsembleForSeq2SeqLM([models["rnn"], other])
    with pytest.raises(EncdecError, match="at least one model"):
        EnsembleForSeq2SeqLM([])


# --- the command line ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def source_file(dates, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "dates.txt"
    path.write_text("".join(source + "\n" for source, _ in dates[2][:5]) + "\n" + dates[2][5][0] + "\n")
    return path


def run_cli(args: list[str], capsys) -> str:
    assert main(args) == 0
    return capsys.readouterr().out


def test_cli_translate_with_an_ensemble_prints_n_best_lists_with_scores_and_alignments(folders, models, source_file,
                                                                                        capsys) -> None:
    model_args = ["--model", str(folders["transformer"]), "--model", str(folders["rnn"])]
    lines = run_cli(["translate", *model_args, "--input", str(source_file), "--num-beams", "4", "--n-best", "3",
                     "--scores", "--alignments"], capsys).splitlines()
    sources = source_file.read_text().splitlines()
    assert len(lines) == 3 * 6 + 1  # 3 per input, one for the blank line
    fields = [line.split(" ||| ") for line in lines]
    assert all(len(f) == 4 for f in fields)
    assert [int(f[0]) for f in fields] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 6, 6, 6]
    assert fields[15] == ["5", "", "", ""]  # the blank line: kept, empty

    tokenizer = load_ensemble([folders["transformer"], folders["rnn"]])[1]
    members = [models["transformer"], models["rnn"]]  # the models the folders were saved from
    plain = run_cli(["translate", *model_args, "--input", str(source_file), "--num-beams", "4"], capsys).splitlines()
    for index, source in enumerate(sources):
        if not source:
            continue
        listed = [f for f in fields if f[0] == str(index)]
        assert listed[0][1] == plain[index]  # the best of the list is the plain translation
        assert len({f[1] for f in listed}) == 3
        for _, text, score, alignment in listed:
            target_ids = tokenizer(text_target=text)["input_ids"]
            expected = log_linear_score(members, tokenizer(source)["input_ids"], target_ids)
            assert float(score) == pytest.approx(expected, abs=2e-3)  # 4 decimals printed; retokenised text
            for link in alignment.split():
                i, j = map(int, link.split("-"))
                assert 0 <= i < len(source.split()) and 0 <= j < len(text.split())


def test_cli_evaluate_with_an_ensemble(folders, dates, tmp_path, capsys) -> None:
    sources, references = tmp_path / "src.txt", tmp_path / "ref.txt"
    sources.write_text("".join(s + "\n" for s, _ in dates[2][:20]))
    references.write_text("".join(t + "\n" for _, t in dates[2][:20]))
    args = ["evaluate", "--model", str(folders["transformer"]), "--model", str(folders["rnn"]), "--source-file",
            str(sources), "--reference-file", str(references), "--num-beams", "2"]
    results = json.loads(run_cli(args, capsys))
    assert results["model_dir"] == [str(folders["transformer"].resolve()), str(folders["rnn"].resolve())]
    ensemble, tokenizer = load_ensemble([folders["transformer"], folders["rnn"]])
    hypotheses = translate(ensemble, tokenizer, [s for s, _ in dates[2][:20]], num_beams=2)
    bleu = sacrebleu.corpus_bleu(hypotheses, [[t for _, t in dates[2][:20]]]).score
    assert results["num_sentences"] == 20 and results["bleu"] == round(bleu, 2) > 0
    assert main([*args, "--card-dataset", "dates"]) == 2
    assert "an ensemble has none" in capsys.readouterr().err
    assert main([*args, "--engine", "ctranslate2"]) == 2
    assert "--engine torch only" in capsys.readouterr().err


def test_translate_detailed_scores_equal_teacher_forcing_for_one_model(folders, dates) -> None:
    ensemble, tokenizer = load_ensemble([folders["rnn"]])
    sources = [source for source, _ in dates[2][:4]]
    detailed = translate_detailed(ensemble, tokenizer, sources, n_best=2, scores=True, num_beams=2)
    model = ensemble.members[0]
    for source, hypotheses in zip(sources, detailed, strict=True):
        alone = translate_detailed(model, tokenizer, [source], n_best=2, scores=True, num_beams=2)[0]
        assert [h.text for h in hypotheses] == [h.text for h in alone]
        assert [h.score for h in hypotheses] == pytest.approx([h.score for h in alone], abs=1e-5)
        for hypothesis in hypotheses:
            ids = tokenizer(text_target=hypothesis.text)["input_ids"]
            expected = log_linear_score([model], tokenizer(source)["input_ids"], ids)  # the model's own pass
            assert hypothesis.score == pytest.approx(expected, abs=1e-4)


def test_cli_help_documents_the_ensemble_and_the_formats(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["translate", "--help"])
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help text
    assert "ensemble" in out and "--n-best" in out and "Pharaoh" in out and "log P(hypothesis | input)" in out
