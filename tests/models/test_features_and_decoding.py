"""Featurisation labels map back to the exact answer text; decoding returns exact context substrings."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import datasets
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from musique_models import PROJECT_ROOT
from musique_models.data.source import DatasetSource
from musique_models.errors import ConfigValueError
from musique_models.features.answerer import featurize_answerer
from musique_models.features.context import (
    PARAGRAPH_MARKER,
    YES_NO_PREFIX,
    ContextBuilder,
    FeaturizationError,
    answer_offset,
    build_context,
    locate_answer,
    ordered_paragraphs,
)
from musique_models.features.selector import featurize_selector
from musique_models.models.answerer import MultiParagraphAnswerer
from musique_models.models.backbone import load_tokenizer
from musique_models.models.base import slanted_triangular
from musique_models.models.decoding import (
    WINDOW_COLUMNS,
    best_spans,
    decode_predictions,
    decode_questions,
    window_outputs,
)
from musique_models.training.datamodule import featurize
from musique_models.training.loaders import BalancedNegatives, BucketBatchSampler, PaddingCollator
from tests.conftest import SAMPLES


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(instantiate(OmegaConf.load(PROJECT_ROOT / "conf/backbone/minilm.yaml")))


def _table(tmp_path: Path, relative: str, data_format: str, rows: int):
    source = DatasetSource(
        name="t",
        display_name="t",
        format=data_format,
        files={"dev": str(SAMPLES / relative)},
        data_dir="/",
        cache_dir=str(tmp_path),
    )
    table = source.load("dev").select(range(rows))
    rng = random.Random(0)
    selected = []
    for paragraphs in table["paragraphs"]:
        idxs = [p["idx"] for p in paragraphs]
        rng.shuffle(idxs)
        selected.append(idxs[:7])
    return table.add_column("selected_idxs", selected)


@pytest.mark.parametrize(
    ("relative", "data_format", "include_title", "prefix"),
    [
        ("musique_full/dev_derived.jsonl", "musique", False, ""),
        ("hotpotqa/dev.json", "hotpotqa", True, ""),
        ("hotpotqa/dev.json", "hotpotqa", True, YES_NO_PREFIX),
    ],
)
def test_answer_labels_point_at_the_answer_text(
    tokenizer, tmp_path: Path, relative, data_format, include_title, prefix
) -> None:
    table = _table(tmp_path, relative, data_format, 40)
    windows = featurize(
        table,
        featurize_answerer,
        tokenizer,
        tmp_path / "features",
        "answerer",
        max_length=192,
        stride=64,
        include_title=include_title,
        prefix=prefix,
    )
    labelled = 0
    for window in windows:
        example = table[window["example_row"]]
        context, spans = build_context(
            ordered_paragraphs(example["paragraphs"], example["selected_idxs"]), include_title, prefix
        )
        # every marker is a real [[PP]] and names a selected paragraph, with its gold support flag
        assert all(
            window["input_ids"][p] == tokenizer.convert_tokens_to_ids(PARAGRAPH_MARKER)
            for p in window["marker_positions"]
        )
        assert set(window["marker_paragraph_idx"]) <= set(example["selected_idxs"])
        supporting = {p["idx"] for p in example["paragraphs"] if p["is_supporting"]}
        assert window["support_labels"] == [float(i in supporting) for i in window["marker_paragraph_idx"]]
        if window["start_position"]:
            start = window["offset_start"][window["start_position"]]
            end = window["offset_end"][window["end_position"]]
            # the official matching takes the answer as a substring too ("Democrat" in "Democratic"): the label
            # covers the whole tokens holding it
            assert any(a.lower() in context[start:end].lower() for a in [example["answer"], *example["answer_aliases"]])
            assert len(context[start:end]) < len(example["answer"]) + 12 or example["answer_aliases"]
            if example["answer"] in ("yes", "no") and prefix:
                assert start < len(prefix)  # read from the ( yes | no ) prefix
            labelled += 1
    assert labelled >= 10


def test_decoded_answers_are_exact_context_substrings(tokenizer, tmp_path: Path) -> None:
    table = _table(tmp_path, "musique_ans/dev.jsonl", "musique", 12)
    windows = featurize(
        table,
        featurize_answerer,
        tokenizer,
        tmp_path / "features",
        "answerer",
        max_length=128,
        stride=32,
        include_title=False,
    )
    batch = PaddingCollator(tokenizer.pad_token_id)([{**windows[i], "feature_row": i} for i in range(len(windows))])
    generator = torch.Generator().manual_seed(0)
    shape = batch["input_ids"].shape
    # long answers allowed and logits favouring tokens right after markers, so that spans would cross markers
    boost = torch.zeros(shape)
    for window, positions in enumerate(batch["marker_positions"].tolist()):
        for position in positions:
            boost[window, max(position - 2, 0)] += 5.0
            boost[window, min(position + 2, shape[1] - 1)] += 5.0
    outputs = {
        "start_logits": torch.randn(shape, generator=generator) + boost,
        "end_logits": torch.randn(shape, generator=generator) + boost,
        "support_logits": torch.randn(batch["marker_positions"].shape, generator=generator),
        "answerable_logit": torch.randn(shape[0], generator=generator),
        "type_logits": torch.randn(shape[0], 3, generator=generator),
    }
    score, start, end = best_spans(outputs["start_logits"], outputs["end_logits"], batch["offset_mapping"], 30)
    in_context = batch["offset_mapping"][..., 0] >= 0
    rows = torch.arange(len(start))
    assert bool((end >= start).all() and (end - start < 30).all())
    assert bool(in_context[rows, start].all() and in_context[rows, end].all())
    for window in range(len(start)):  # no marker (or other non-context token) inside a span
        assert bool(in_context[window, start[window] : end[window] + 1].all())
    window_table, marker_table = window_outputs(batch, outputs, 30)

    context_of = ContextBuilder(table, include_title=False)
    predictions = decode_predictions(window_table, marker_table, table["id"], context_of)
    assert [p.id for p in predictions] == table["id"]
    for row, prediction in enumerate(predictions):
        assert prediction.predicted_answer and prediction.predicted_answer in context_of(row)
        assert PARAGRAPH_MARKER not in prediction.predicted_answer
        assert set(prediction.predicted_support_idxs) <= set(table[row]["selected_idxs"])
    # DDP padding repeats a window: the decoded predictions must not change
    repeated = decode_predictions(
        torch.cat([window_table, window_table[:3]]),
        torch.cat([marker_table, marker_table[:5]]),
        table["id"],
        context_of,
    )
    assert repeated == predictions
    # each question's confidence is its decoded span's probability: start x end softmax over the context tokens
    decoded = decode_questions(window_table, marker_table, len(table), context_of)
    assert [question.answer for question in decoded] == [p.predicted_answer for p in predictions]
    for window in range(len(start)):
        starts = outputs["start_logits"][window].double().masked_fill(~in_context[window], float("-inf"))
        ends = outputs["end_logits"][window].double().masked_fill(~in_context[window], float("-inf"))
        expected = (starts.softmax(-1)[start[window]] * ends.softmax(-1)[end[window]]).item()
        assert window_table[window, WINDOW_COLUMNS.index("span_prob")].item() == pytest.approx(expected, rel=1e-9)
    best = {}
    for window in range(len(start)):
        row = int(batch["example_row"][window])
        if row not in best or score[window] > score[best[row]]:
            best[row] = window
    for row, question in enumerate(decoded):
        assert question.confidence == window_table[best[row], WINDOW_COLUMNS.index("span_prob")].item()
        assert 0.0 < question.confidence <= 1.0
        assert question.top_paragraph == max(question.support_probs, key=question.support_probs.get)


def test_selector_pairs_complete_and_balanced_afresh_each_epoch(tokenizer, tmp_path: Path) -> None:
    table = _table(tmp_path, "musique_ans/dev.jsonl", "musique", 10)
    pairs = featurize(table, featurize_selector, tokenizer, tmp_path / "f", "sel", max_length=128)
    gold = {(row, p["idx"]) for row, ps in enumerate(table["paragraphs"]) for p in ps if p["is_supporting"]}
    # 128 tokens of text, then [CLS] and [SEP] (the official reader clips the text, then adds the special tokens)
    assert len(pairs) == 200 and max(len(ids) for ids in pairs["input_ids"]) == 130
    # the official text: "question SEP paragraph" as ONE sequence (no pair, no title)
    first = table[0]["paragraphs"][0]
    expected = tokenizer(f"{table[0]['question']} SEP {first['text']}", truncation=True, max_length=130)
    assert pairs[0]["input_ids"] == expected["input_ids"] and set(pairs[0]["token_type_ids"]) == {0}
    assert pairs[0]["input_ids"].count(tokenizer.sep_token_id) == 1
    assert {
        (r, i) for r, i, label in zip(pairs["example_row"], pairs["paragraph_idx"], pairs["label"]) if label
    } == gold

    balanced = BalancedNegatives(pairs["label"], pairs["example_row"], seed=1)
    epochs = [balanced.rows(epoch) for epoch in range(3)]
    for rows in epochs:
        assert len(rows) == len(balanced) == 2 * len(gold)
        labels = [pairs["label"][row] for row in rows]
        per_question = Counter((pairs["example_row"][row], label) for row, label in zip(rows, labels))
        assert all(per_question[(q, 1.0)] == per_question[(q, 0.0)] for q in range(10))  # balanced per question
        assert {(pairs["example_row"][r], pairs["paragraph_idx"][r]) for r in rows if pairs["label"][r]} == gold
    negatives = [{r for r in rows if not pairs["label"][r]} for rows in epochs]
    assert negatives[0] != negatives[1] != negatives[2]  # fresh negatives each epoch
    assert balanced.rows(1) == epochs[1]  # reproducible

    # a training batch is N whole QUESTIONS (their gold rows and as many negatives), as the official selector's
    sampler = BucketBatchSampler([len(ids) for ids in pairs["input_ids"]], 3, shuffle=True, seed=0, subset=balanced)
    batches = sampler.batches()
    assert len(batches) == len(sampler) == 4  # 10 questions, 3 per batch
    for batch in batches:
        questions = Counter(pairs["example_row"][row] for row in batch)
        assert len(questions) <= 3
        for question, count in questions.items():
            assert count == 2 * sum(1 for row, _ in gold if row == question)
    assert sorted(row for batch in batches for row in batch) == sorted(balanced.rows(0))


def _brute_force_best_span(start, end, in_context, segment, cap):
    best = (float("-inf"), -1, -1)
    for i in range(len(start)):
        for j in range(i, len(start) if cap is None else min(len(start), i + cap)):
            if in_context[i] and in_context[j] and segment[i] == segment[j]:
                best = max(best, (float(start[i] + end[j]), i, j), key=lambda item: item[0])
    return best


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("cap", [None, 1, 4])
def test_best_span_is_the_exhaustive_best_within_a_paragraph(cap, ties) -> None:
    """Against a brute-force search over every pair, in the official row-major order: on ties (logits in a few
    integer values, as bf16 makes them common) the smallest start, then the smallest end."""
    generator = torch.Generator().manual_seed(3)
    windows, tokens = 8, 40

    def logits() -> torch.Tensor:
        if ties:
            return torch.randint(0, 3, (windows, tokens), generator=generator).float()
        return torch.randn(windows, tokens, generator=generator)

    start_logits, end_logits = logits(), logits()
    offsets = torch.arange(tokens).repeat(windows, 1)[..., None].repeat(1, 1, 2)
    outside = torch.rand(windows, tokens, generator=generator) < 0.2  # question, special tokens, markers
    outside[:, :3] = True
    offsets[outside] = -1
    score, start, end = best_spans(start_logits, end_logits, offsets, cap)
    segment = torch.cumsum(outside, dim=1)
    for w in range(windows):
        expected = _brute_force_best_span(start_logits[w], end_logits[w], ~outside[w], segment[w], cap)
        assert float(score[w]) == pytest.approx(expected[0])
        assert (int(start[w]), int(end[w])) == expected[1:]


def test_featurisers_refuse_what_they_cannot_encode_with_a_clear_error(tmp_path) -> None:
    spec = instantiate(OmegaConf.load(PROJECT_ROOT / "conf/backbone/minilm.yaml"))
    tokenizer = load_tokenizer(spec)
    paragraph = {"idx": 0, "title": "t", "text": "Paris is in France.", "is_supporting": True}
    example = {
        "question": "Where is Paris?",
        "answer": "France",
        "answer_aliases": [],
        "answerable": True,
        "paragraphs": [paragraph],
        "selected_idxs": [0],
    }
    settings = {"max_length": 64, "stride": 16, "include_title": False}
    marked = datasets.Dataset.from_list([{**example, "paragraphs": [{**paragraph, "text": "a [[PP]] b"}]}])
    with pytest.raises(FeaturizationError, match=r"paragraph 0 .* contains the paragraph marker"):
        featurize(marked, featurize_answerer, tokenizer, tmp_path, "marked", **settings)
    long_question = datasets.Dataset.from_list([{**example, "question": "why " * 80}])
    with pytest.raises(FeaturizationError, match="a question of 80 tokens leaves no room"):
        featurize(long_question, featurize_answerer, tokenizer, tmp_path, "long", **settings)


def test_unanswerable_rows_are_supervised_for_support_with_every_label_zero() -> None:
    """As the official model: an unanswerable row's markers count in the support loss, with labels 0 whatever
    the data's is_supporting flags say (a MuSiQue-Full contrast keeps the flags of its other hops)."""
    spec = instantiate(OmegaConf.load(PROJECT_ROOT / "conf/backbone/tiny.yaml"))
    answerer = MultiParagraphAnswerer(spec, vocab_size=30523, answerability_head=True)
    batch = {
        "answerable": torch.tensor([1, 0]),
        "answer_type": torch.tensor([0, 0]),
        "start_position": torch.tensor([1, 0]),
        "end_position": torch.tensor([1, 0]),
        "support_labels": torch.tensor([[1.0, 0.0], [1.0, 0.0]]),  # the unanswerable row keeps a flag
        "marker_mask": torch.tensor([[True, True], [True, True]]),
        "offset_mapping": torch.zeros(2, 4, 2, dtype=torch.long),  # every token in the context
    }

    def loss_with(unanswerable_support_logits: list[float]) -> float:
        outputs = {
            "start_logits": torch.zeros(2, 4),
            "end_logits": torch.zeros(2, 4),
            "support_logits": torch.tensor([[0.0, 0.0], unanswerable_support_logits]),
            "answerable_logit": torch.zeros(2),
            "type_logits": torch.zeros(2, 3),
        }
        return float(answerer.loss(batch, outputs))

    # pushing the unanswerable row's support logits up raises the loss (label 0), down lowers it
    assert loss_with([5.0, 5.0]) > loss_with([0.0, 0.0]) > loss_with([-5.0, -5.0])
    expected_support = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.tensor([0.0, 0.0, 3.0, -1.0]), torch.tensor([1.0, 0.0, 0.0, 0.0])
    )
    span = torch.log(torch.tensor(4.0))  # uniform start and end over 4 tokens, answerable row only
    answerability = torch.nn.functional.binary_cross_entropy_with_logits(torch.zeros(2), torch.tensor([1.0, 0.0]))
    assert loss_with([3.0, -1.0]) == pytest.approx(float(span + expected_support + answerability), rel=1e-5)


def test_span_loss_is_over_context_tokens_and_ignores_rows_whose_answer_is_not_in_the_input() -> None:
    spec = instantiate(OmegaConf.load(PROJECT_ROOT / "conf/backbone/tiny.yaml"))
    answerer = MultiParagraphAnswerer(spec, vocab_size=30523)
    generator = torch.Generator().manual_seed(0)
    outputs = {
        "start_logits": torch.randn(2, 6, generator=generator),
        "end_logits": torch.randn(2, 6, generator=generator),
        "support_logits": torch.zeros(2, 1),
        "answerable_logit": torch.zeros(2),
        "type_logits": torch.zeros(2, 3),
    }
    offsets = torch.arange(6).repeat(2, 1)[..., None].repeat(1, 1, 2)
    offsets[:, :2] = -1  # [CLS] and a question token: outside the context
    batch = {
        "answerable": torch.tensor([1, 1]),
        "answer_type": torch.tensor([0, 0]),
        "start_position": torch.tensor([2, -1]),  # row 1: the answer is not in the input (official: ignored)
        "end_position": torch.tensor([3, -1]),
        "support_labels": torch.zeros(2, 1),
        "marker_mask": torch.ones(2, 1, dtype=torch.bool),
        "offset_mapping": offsets,
    }
    support = torch.nn.functional.binary_cross_entropy_with_logits(torch.zeros(2), torch.zeros(2))
    cross_entropy = torch.nn.functional.cross_entropy
    # row 0 only, its softmax over the 4 context tokens (positions 2-5): labels 2 and 3 are context tokens 0 and 1
    span = (
        cross_entropy(outputs["start_logits"][:1, 2:], torch.tensor([0]))
        + cross_entropy(outputs["end_logits"][:1, 2:], torch.tensor([1]))
    ) / 2
    assert float(answerer.loss(batch, outputs)) == pytest.approx(float(span + support), rel=1e-5)


def test_answer_offset_follows_the_official_order_of_preference() -> None:
    # a space on both sides beats an earlier bare substring; then a space before; then after; then anywhere
    assert answer_offset("art", "party art fair") == 6
    assert answer_offset("art", "party art") == 6
    assert answer_offset("art", "art party") == 0
    assert answer_offset("art", "partys") == 1
    # case only matters when no case-sensitive occurrence exists
    assert answer_offset("Art", "the art of Art") == 11
    assert answer_offset("ART", "the art") == 4
    assert answer_offset("zebra", "the art") is None


def test_the_gold_span_is_in_the_last_supporting_paragraph_that_holds_it() -> None:
    paragraphs = [
        {"idx": 0, "title": "A", "text": "Paris is big.", "is_supporting": True},
        {"idx": 1, "title": "B", "text": "Paris again.", "is_supporting": False},
        {"idx": 2, "title": "C", "text": "We saw Paris.", "is_supporting": True},
    ]
    context, spans = build_context(paragraphs, include_title=False)
    start, end = locate_answer(context, spans, {0, 2}, ["Paris"])
    assert context[start:end] == "Paris" and spans[2].text_start <= start < spans[2].text_end
    # not in any supporting paragraph: the whole context's first match by the official order
    start, _ = locate_answer(context, spans, {0}, ["again"])
    assert spans[1].text_start <= start < spans[1].text_end
    assert locate_answer(context, spans, {0, 2}, ["Rome"]) is None
    # yes/no: read from the ( yes | no ) prefix, which opens the context
    prefixed, prefixed_spans = build_context(paragraphs, include_title=True, prefix=YES_NO_PREFIX)
    assert prefixed.startswith(f"{YES_NO_PREFIX} [[PP]] A || Paris is big.")
    start, end = locate_answer(prefixed, prefixed_spans, {0, 2}, ["no"], prefix=YES_NO_PREFIX)
    assert (start, end) == (8, 10) and prefixed[start:end] == "no"
    assert locate_answer(context, spans, {0, 2}, ["yes"]) is None  # no prefix, and nowhere in the paragraphs
    # whitespace runs collapse to one space in the context, as the official reader's clean_ws
    spaced, _ = build_context([{**paragraphs[0], "text": "Paris\n  is   big."}], include_title=False)
    assert spaced == "[[PP]] Paris is big. "


def test_slanted_triangular_schedule_is_allennlps() -> None:
    total = 1000
    values = [slanted_triangular(step, total) for step in range(total + 1)]
    assert values[0] == pytest.approx(1 / 32) and values[100] == pytest.approx(1.0)  # peak at cut_frac 0.1
    assert values[-1] == pytest.approx(1 / 32)
    assert all(a <= b for a, b in zip(values[:100], values[1:101])) and all(
        a >= b for a, b in zip(values[100:], values[101:])
    )
    with pytest.raises(ConfigValueError, match="schedule='cosine': expected one of linear, slanted_triangular"):
        MultiParagraphAnswerer(
            instantiate(OmegaConf.load(PROJECT_ROOT / "conf/backbone/tiny.yaml")), 30523, schedule="cosine"
        )
