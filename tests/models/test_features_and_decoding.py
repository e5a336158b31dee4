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
from musique_models.features.answerer import featurize_answerer
from musique_models.features.context import (
    PARAGRAPH_MARKER,
    ContextBuilder,
    FeaturizationError,
    build_context,
    ordered_paragraphs,
)
from musique_models.features.selector import featurize_selector
from musique_models.models.answerer import MultiParagraphAnswerer
from musique_models.models.backbone import load_tokenizer
from musique_models.models.decoding import best_spans, decode_predictions, window_outputs
from musique_models.training.datamodule import featurize
from musique_models.training.loaders import BalancedNegatives, PaddingCollator
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
    ("relative", "data_format", "include_title"),
    [("musique_full/dev_derived.jsonl", "musique", False), ("hotpotqa/dev.json", "hotpotqa", True)],
)
def test_answer_labels_point_at_the_answer_text(
    tokenizer, tmp_path: Path, relative, data_format, include_title
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
    )
    labelled = 0
    for window in windows:
        example = table[window["example_row"]]
        context, spans = build_context(
            ordered_paragraphs(example["paragraphs"], example["selected_idxs"]), include_title
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
            assert context[start:end].lower() in [a.lower() for a in [example["answer"], *example["answer_aliases"]]]
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


def test_selector_pairs_complete_and_balanced_afresh_each_epoch(tokenizer, tmp_path: Path) -> None:
    table = _table(tmp_path, "musique_ans/dev.jsonl", "musique", 10)
    pairs = featurize(table, featurize_selector, tokenizer, tmp_path / "f", "sel", max_length=128, include_title=False)
    gold = {(row, p["idx"]) for row, ps in enumerate(table["paragraphs"]) for p in ps if p["is_supporting"]}
    assert len(pairs) == 200 and max(len(ids) for ids in pairs["input_ids"]) <= 128
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
