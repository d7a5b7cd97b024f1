"""Word alignments from attention (``encdec.inference.alignment``): the AER formula, the Pharaoh format, subwords lifted
to words, the date task whose alignment is known by construction, trained models that really align (better than the
monotone diagonal), the layer chosen on gold data and recorded for ``translate --alignments``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from encdec.data import MONTHS, WEEKDAYS
from encdec.errors import EncdecError
from encdec.folders import save_for_pipeline
from encdec.inference import load_model_and_tokenizer
from encdec.inference.alignment import (
    ALIGNMENT_FILE,
    MEAN,
    alignment_error_rate,
    attention_by_layer,
    choose_layer,
    date_alignment_pairs,
    default_layer,
    encode_pairs,
    hard_links,
    layer_weights,
    parse_pharaoh,
    to_pharaoh,
    word_links,
    word_of_tokens,
)
from encdec.tokenization import special_token_ids
from encdec_cli import main
from tiny_model_folders import DATE_RNN
from toy import tiny_model


def align_pair(model, tokenizer, source_ids: list[int], target_ids: list[int], layer: int | str) -> set:
    """The word links of one (source ids, output ids) pair, from decoder layer ``layer``, aligned alone."""
    return word_links(layer_weights(attention_by_layer(model, source_ids, target_ids), layer), tokenizer, source_ids,
                      target_ids)


def test_alignment_error_rate_follows_och_and_ney() -> None:
    sure = [{(0, 0), (1, 1)}, {(0, 1)}]
    assert alignment_error_rate(sure, sure) == 0.0
    assert alignment_error_rate([set(), set()], sure) == 1.0
    # A = {00, 10} and {01}: |A&S| = 2, |A| = 3, |S| = 3 -> 1 - 4/6
    assert alignment_error_rate([{(0, 0), (1, 0)}, {(0, 1)}], sure) == pytest.approx(1 - 4 / 6)
    # a possible link counts in the numerator once, a sure one twice
    possible = [{(1, 0)}, set()]
    assert alignment_error_rate([{(0, 0), (1, 0)}, {(0, 1)}], sure, possible) == pytest.approx(1 - 5 / 6)
    with pytest.raises(EncdecError, match="one per pair"):
        alignment_error_rate([set()], sure)


def test_pharaoh_round_trip_and_errors() -> None:
    links = {(2, 0), (0, 1), (0, 0)}
    assert to_pharaoh(links) == "0-0 0-1 2-0"
    assert parse_pharaoh("0-0 0-1 2-0") == links
    assert parse_pharaoh("3?4") == {(3, 4)} and parse_pharaoh("") == set()
    with pytest.raises(EncdecError, match=r"gold, line 3: 'a-b' is not a Pharaoh link"):
        parse_pharaoh("0-0 a-b", "gold, line 3")


def test_the_date_task_aligns_each_field_with_the_words_that_write_it() -> None:
    triples = date_alignment_pairs(400, seed=5)
    for source, target, gold in triples:
        year, month, day = target.split()
        assert len(year) == 4 and len(month) == len(day) == 2
        forms = ({year, year[2:]}, {month, str(int(month)), MONTHS[int(month) - 1][:3].lower()},
                 {day, str(int(day))})
        words = source.lower().split()
        for i, j in gold:  # every link joins a field with a word that writes it
            assert any(form in words[i] for form in forms[j]), (source, target, gold)
        assert {j for _, j in gold} == {0, 1, 2}  # every field is written somewhere
    assert date_alignment_pairs(30, seed=3) == date_alignment_pairs(30, seed=3)
    weekdays = [(s, g) for s, _, g in triples if s.split()[0].rstrip(",") in WEEKDAYS]
    assert weekdays and all(g == {(1, 2), (2, 1), (3, 0)} for _, g in weekdays)  # "Friday, 15 Feb 2019"
    packed = [g for s, _, g in triples if len(s.split()) == 1]  # "03.03.2021", "3/3/2021", "2021/03/03", "3-Mar-21"
    assert packed and all(g == {(0, 0), (0, 1), (0, 2)} for g in packed)


def test_subwords_are_lifted_to_the_words_of_the_line(aligned_dates) -> None:
    tokenizer = aligned_dates[0]
    for text in ("Friday, 15 Feb 2019", "03.03.2021", "MAR 3rd 2021"):
        ids = tokenizer(text)["input_ids"]
        words = word_of_tokens(tokenizer, ids)
        assert words[-1] is None  # </s>
        known = [w for w in words if w is not None]
        assert known == sorted(known) and set(known) == set(range(len(text.split())))
        assert len(ids) > len(text.split()) + 1 or text == "03.03.2021"  # subwords, not words


def test_hard_links_take_each_target_subwords_best_source_word() -> None:
    weights = torch.tensor([[0.7, 0.1, 0.0], [0.2, 0.1, 0.1], [0.1, 0.8, 0.9]])  # (S=3, T=3)
    assert hard_links(weights, [0, 0, 1], [0, 1, 1]) == {(0, 0), (1, 1)}
    assert hard_links(weights, [0, 0, None], [0, 1, None]) == {(0, 0), (0, 1)}  # </s> rows and columns skipped
    by_layer = torch.stack([weights, weights.flip(0)])
    assert torch.equal(layer_weights(by_layer, MEAN), by_layer.mean(0))
    assert torch.equal(layer_weights(by_layer, -1), by_layer[1])
    with pytest.raises(EncdecError, match="does not exist: the model has 2 decoder layer"):
        layer_weights(by_layer, 2)


def diagonal_aer(triples) -> float:
    """The baseline: target word j linked to source word round(j * (I - 1) / 2)."""
    predicted = [{(round(j * (len(s.split()) - 1) / 2), j) for j in range(3)} for s, _, _ in triples]
    return alignment_error_rate(predicted, [gold for _, _, gold in triples])


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_trained_models_align_the_date_task_better_than_the_diagonal(aligned_models, aligned_dates, family) -> None:
    tokenizer, _, held_out = aligned_dates
    sources, targets, gold = ([t[k] for t in held_out] for k in range(3))
    best, rates = choose_layer(aligned_models[family], tokenizer, sources, targets, gold)
    layers = aligned_models[family].config.decoder_layers if family == "transformer" else 1
    assert set(rates) == ({str(k) for k in range(layers)} | ({MEAN} if layers > 1 else set()))
    assert rates[str(best)] == min(rates.values())
    baseline = diagonal_aer(held_out)
    assert rates[str(best)] < 0.4 < baseline, (rates, baseline)
    # each candidate's rate is what aligning the pairs one by one on that layer gives
    one_by_one = [align_pair(aligned_models[family], tokenizer, s, t, best) for s, t in encode_pairs(tokenizer, sources,
                                                                                             targets)]
    assert alignment_error_rate(one_by_one, gold) == pytest.approx(rates[str(best)])


def test_cli_align_chooses_records_and_translate_uses_the_layer(aligned_models, aligned_dates, tmp_path,
                                                                capsys) -> None:
    tokenizer, _, held_out = aligned_dates
    folder = save_for_pipeline(aligned_models["transformer"], tokenizer, tmp_path / "model")
    files = {name: tmp_path / f"{name}.txt" for name in ("src", "tgt", "gold")}
    for k, name in enumerate(files):
        files[name].write_text("".join((to_pharaoh(t[k]) if name == "gold" else t[k]) + "\n" for t in held_out))
    args = ["align", "--model", str(folder), "--source-file", str(files["src"]), "--target-file", str(files["tgt"])]

    model, _ = load_model_and_tokenizer(folder)
    assert default_layer(model) == 1  # nothing recorded: the penultimate of 3 layers (Garg et al. 2019)
    assert main([*args, "--gold-file", str(files["gold"]), "--record"]) == 0
    report = json.loads(capsys.readouterr().out)
    record = json.loads((folder / ALIGNMENT_FILE).read_text())
    assert record["layer"] == report["layer"] and record["aer"] == report["aer"] and report["pairs"] == 150
    model, _ = load_model_and_tokenizer(folder)
    assert default_layer(model) == report["layer"]

    assert main([*args, "--output", str(tmp_path / "out.txt")]) == 0  # forced alignment of given pairs
    lines = (tmp_path / "out.txt").read_text().splitlines()
    predicted = [parse_pharaoh(line) for line in lines]
    assert alignment_error_rate(predicted, [t[2] for t in held_out]) == pytest.approx(
        report["aer"][str(report["layer"])])
    assert main([*args, "--record"]) == 2
    assert "--record needs --gold-file" in capsys.readouterr().err

    (tmp_path / "one.txt").write_text(held_out[0][0] + "\n")
    assert main(["translate", "--model", str(folder), "--input", str(tmp_path / "one.txt"), "--alignments",
                 "--alignment-layer", "mean", "--num-beams", "2"]) == 0
    text, links = capsys.readouterr().out.strip().split(" ||| ")
    assert all(0 <= i < len(held_out[0][0].split()) and 0 <= j < len(text.split())
               for i, j in parse_pharaoh(links))
    assert main(["translate", "--model", str(folder), "--input", str(tmp_path / "one.txt"), "--alignments",
                 "--alignment-layer", "first"]) == 2
    assert "--alignment-layer 'first'" in capsys.readouterr().err


def test_a_model_without_attention_cannot_align(aligned_dates) -> None:
    tokenizer = aligned_dates[0]
    model = tiny_model({**DATE_RNN, "attention": "none"}, **special_token_ids(tokenizer))
    source_ids, target_ids = encode_pairs(tokenizer, ["3 March 2021"], ["2021 03 03"])[0]
    with pytest.raises(EncdecError, match="no attention to align with"):
        align_pair(model, tokenizer, source_ids, target_ids, 0)


def test_alignment_record_errors_name_the_file(tmp_path: Path, aligned_models, aligned_dates) -> None:
    folder = save_for_pipeline(aligned_models["rnn"], aligned_dates[0], tmp_path / "rnn")
    model, _ = load_model_and_tokenizer(folder)
    assert default_layer(model) == 0  # an RNN has one alignment
    (folder / ALIGNMENT_FILE).write_text("{broken")
    with pytest.raises(EncdecError, match=str(folder / ALIGNMENT_FILE)):
        default_layer(model)
