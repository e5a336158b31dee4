"""End2End: the long input's layout and clipping, global attention, labels, support idx mapping, and train.py runs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from musique_models import PROJECT_ROOT
from musique_models.data.source import DatasetSource
from musique_models.errors import ConfigValueError
from musique_models.features.context import PARAGRAPH_MARKER, YES_NO_PREFIX, build_context
from musique_models.features.end2end import featurize_end2end, shared_cap
from musique_models.models.backbone import BackboneError, load_tokenizer
from musique_models.models.decoding import decode_predictions, window_outputs
from musique_models.models.end2end import End2EndReader
from musique_models.recipes.build import instantiate_recipe
from musique_models.recipes.end2end import End2End, in_dataset_order
from musique_models.runs.train import train
from musique_models.training.datamodule import featurize
from musique_models.training.loaders import PaddingCollator
from tests.conftest import DATASET_CONFIGS, ONE_THREAD, SAMPLES

TINY_END2END = [
    "backbone=tiny_longformer",
    "dataset.sample=true",
    "dataset.train_size=6",
    "eval_size=4",
    "trainer.enable_progress_bar=false",
    ONE_THREAD,
    "model.eval_batch_size=4",
]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(instantiate(OmegaConf.load(PROJECT_ROOT / "conf/backbone/minilm.yaml")))


def _table(tmp_path: Path, relative: str, data_format: str, rows: int, shuffle_paragraphs: bool = False):
    source = DatasetSource(
        name="t",
        display_name="t",
        format=data_format,
        files={"dev": str(SAMPLES / relative)},
        data_dir="/",
        cache_dir=str(tmp_path),
    )
    table = source.load("dev").select(range(rows))
    if shuffle_paragraphs:  # dataset order no longer follows idx: support must still map to the original idx
        rng = random.Random(0)
        shuffled = [rng.sample(paragraphs, len(paragraphs)) for paragraphs in table["paragraphs"]]
        table = table.remove_columns("paragraphs").add_column("paragraphs", shuffled)
    return in_dataset_order(table)


def _rows(tokenizer, table, tmp_path: Path, **settings):
    defaults = {"max_question_tokens": 150, "max_paragraph_tokens": 250, "max_length": 4000, "include_title": False}
    return featurize(table, featurize_end2end, tokenizer, tmp_path / "features", "ee", **{**defaults, **settings})


def test_shared_cap_is_the_largest_cap_that_fits() -> None:
    assert shared_cap([10, 20, 30], budget=100, cap=25) == 25  # 10 + 20 + 25 fits
    assert shared_cap([10, 20, 30], budget=45, cap=25) == 17  # 10 + 17 + 17 = 44; 18 would make 46
    assert shared_cap([50, 50], budget=0, cap=25) == 0


def test_input_layout_clipping_and_markers(tokenizer, tmp_path: Path) -> None:
    table = _table(tmp_path, "hotpotqa/dev.json", "hotpotqa", 8)
    rows = _rows(
        tokenizer, table, tmp_path, max_question_tokens=5, max_paragraph_tokens=40, max_length=300, include_title=True
    )
    marker_id = tokenizer.convert_tokens_to_ids(PARAGRAPH_MARKER)
    for row in rows:
        example = table[row["example_row"]]
        ids = row["input_ids"]
        assert len(ids) <= 300
        question = tokenizer(example["question"], add_special_tokens=False)["input_ids"][:5]
        assert ids[: len(question) + 2] == [tokenizer.cls_token_id, *question, tokenizer.sep_token_id]
        assert ids[-1] == tokenizer.sep_token_id
        # every paragraph keeps its marker, in dataset order, with its original idx
        assert [ids[p] for p in row["marker_positions"]] == [marker_id] * len(example["paragraphs"])
        assert row["marker_paragraph_idx"] == [p["idx"] for p in example["paragraphs"]]
        assert sum(1 for token in ids if token == marker_id) == len(example["paragraphs"])
        # no paragraph is longer than the cap; with 10 paragraphs x 40 > 300 the shared cap applies
        bounds = [*row["marker_positions"], len(ids) - 1]
        lengths = [end - start - 1 for start, end in zip(bounds, bounds[1:])]
        assert max(lengths) <= 40 and min(lengths) > 0 and sum(lengths) > 200
        # context tokens point at their own text: the title comes first
        context, _ = build_context(example["paragraphs"], True)
        first = row["marker_positions"][0] + 1
        title = example["paragraphs"][0]["title"]
        assert context[row["offset_start"][first] :].startswith(title[: len(title) // 2])


def test_global_attention_on_everything_before_the_context_and_on_markers(tokenizer, tmp_path: Path) -> None:
    table = _table(tmp_path, "musique_ans/dev.jsonl", "musique", 3)
    for empty_question in (False, True):
        rows = _rows(tokenizer, table, tmp_path, empty_question=empty_question)
        batch = PaddingCollator(tokenizer.pad_token_id, tokenizer.sep_token_id)([rows[i] for i in range(3)])
        for i in range(3):
            question = tokenizer(table[i]["question"], add_special_tokens=False)["input_ids"]
            # [CLS] question [SEP] (the official reader: every token before the context), the first token included:
            # the answerability head reads it
            before_context = set(range(2 if empty_question else 2 + len(question)))
            expected = before_context | set(rows[i]["marker_positions"])
            assert set(torch.nonzero(batch["global_attention_mask"][i]).flatten().tolist()) == expected
            if empty_question:  # C-only: [CLS] [SEP] [[PP]] ...
                assert rows[i]["input_ids"][:3] == [
                    tokenizer.cls_token_id,
                    tokenizer.sep_token_id,
                    tokenizer.convert_tokens_to_ids(PARAGRAPH_MARKER),
                ]


def test_global_attention_on_the_question_only_is_the_former_choice(tokenizer, tmp_path: Path) -> None:
    table = _table(tmp_path, "musique_ans/dev.jsonl", "musique", 2)
    rows = _rows(tokenizer, table, tmp_path, global_attention="question")
    for i in range(2):
        question = tokenizer(table[i]["question"], add_special_tokens=False)["input_ids"]
        expected = set(range(1, 1 + len(question))) | set(rows[i]["marker_positions"])  # no [CLS], no [SEP]
        assert set(rows[i]["global_positions"]) == expected
    with pytest.raises(ConfigValueError, match="global_attention='all': expected one of before_context, question"):
        _rows(tokenizer, table, tmp_path, global_attention="all")


def test_the_head_losses_weigh_support_as_the_official_loss_does(tokenizer, compose_train_cfg, tmp_path: Path) -> None:
    """The official `transformer_rc` loss: (start CE + end CE) / 2 + BCE of the support logits averaged over every
    marker of the batch; on MuSiQue every question has 20 paragraphs, so no marker is padding and ours is equal."""
    table = _table(tmp_path, "musique_ans/dev.jsonl", "musique", 2)
    rows = _rows(tokenizer, table, tmp_path)
    batch = PaddingCollator(tokenizer.pad_token_id, tokenizer.sep_token_id)([rows[0], rows[1]])
    assert bool(batch["marker_mask"].all()) and batch["marker_mask"].shape[1] == 20
    torch.manual_seed(0)
    outputs = {
        "start_logits": torch.randn(batch["input_ids"].shape),
        "end_logits": torch.randn(batch["input_ids"].shape),
        "support_logits": torch.randn(batch["marker_positions"].shape),
    }
    reader = End2EndReader(instantiate(compose_train_cfg(["backbone=tiny_longformer"]).backbone), len(tokenizer))
    losses = reader.head_losses(batch, outputs)
    context = batch["offset_mapping"][..., 0] >= 0
    official_span = (
        sum(
            torch.nn.functional.cross_entropy(outputs[name].masked_fill(~context, -1e4), batch[label])
            for name, label in (("start_logits", "start_position"), ("end_logits", "end_position"))
        )
        / 2
    )
    official_support = torch.nn.BCEWithLogitsLoss()(outputs["support_logits"], batch["support_labels"])
    assert torch.allclose(losses["span"], official_span) and torch.allclose(losses["support"], official_support)
    assert torch.allclose(reader.loss(batch, outputs), official_span + official_support)


def _paragraph_of(row: dict, token: int) -> int:
    """The original idx of the paragraph holding input token `token`."""
    markers = row["marker_positions"]
    return row["marker_paragraph_idx"][max(i for i, marker in enumerate(markers) if marker < token)]


def _visible_paragraphs(row: dict, context: str) -> dict[int, str]:
    """Each paragraph's text as the (clipped) input shows it, lower-cased, by original idx."""
    bounds = [*row["marker_positions"], len(row["input_ids"]) - 1]
    return {
        idx: context[row["offset_start"][start + 1] : row["offset_end"][end - 1]].lower()
        for idx, start, end in zip(row["marker_paragraph_idx"], bounds, bounds[1:])
        if end - start > 1
    }


def test_answer_labels_point_at_the_answer_in_the_last_supporting_paragraph(tokenizer, tmp_path: Path) -> None:
    table = _table(tmp_path, "musique_ans/dev.jsonl", "musique", 30)
    rows = _rows(tokenizer, table, tmp_path, max_length=1500)
    labelled = 0
    for row in rows:
        example = table[row["example_row"]]
        context, _ = build_context(example["paragraphs"], False)
        assert (row["start_position"] >= 0) == (row["end_position"] >= 0)
        if row["start_position"] >= 0:
            text = context[row["offset_start"][row["start_position"]] : row["offset_end"][row["end_position"]]]
            assert text.lower() in [a.lower() for a in [example["answer"], *example["answer_aliases"]]]
            holding = [
                idx
                for idx, shown in _visible_paragraphs(row, context).items()
                if idx in {p["idx"] for p in example["paragraphs"] if p["is_supporting"]} and text.lower() in shown
            ]
            if holding:  # the official reader keeps the LAST supporting paragraph that holds the answer
                assert _paragraph_of(row, row["start_position"]) == holding[-1]
            labelled += 1
    assert labelled >= 15


def test_an_answer_missing_from_the_input_gets_the_ignored_label(tokenizer, tmp_path: Path) -> None:
    table = _table(tmp_path, "musique_ans/dev.jsonl", "musique", 4)
    absent = table.map(lambda example: {"answer": "zzqx unfindable", "answer_aliases": []})
    for row in _rows(tokenizer, absent, tmp_path):
        assert (row["start_position"], row["end_position"]) == (-1, -1)
    # clipped away: paragraphs cut to 2 tokens no longer hold most answers, which are then ignored, not mislabelled
    clipped = _rows(tokenizer, table, tmp_path, max_paragraph_tokens=2)
    full = _rows(tokenizer, table, tmp_path)
    assert sum(row["start_position"] >= 0 for row in clipped) < sum(row["start_position"] >= 0 for row in full)


def test_yes_no_prefix_opens_the_context_and_holds_yes_no_labels(tokenizer, tmp_path: Path) -> None:
    table = _table(tmp_path, "hotpotqa/dev.json", "hotpotqa", 50)
    rows = _rows(tokenizer, table, tmp_path, include_title=True, prefix=YES_NO_PREFIX, max_length=600)
    yes_no = 0
    for row in rows:
        example = table[row["example_row"]]
        context, _ = build_context(example["paragraphs"], True, YES_NO_PREFIX)
        first_marker = row["marker_positions"][0]
        prefix_tokens = [i for i in range(first_marker) if row["offset_start"][i] >= 0]
        # the prefix is context (decodable) and never clipped; the paragraphs come after it
        assert context[row["offset_start"][prefix_tokens[0]] : row["offset_end"][prefix_tokens[-1]]] == YES_NO_PREFIX
        if example["answer"] in ("yes", "no"):
            start, end = row["start_position"], row["end_position"]
            assert start == end and start in prefix_tokens
            assert context[row["offset_start"][start] : row["offset_end"][end]] == example["answer"]
            yes_no += 1
    assert yes_no >= 2


def test_support_predictions_map_back_to_the_original_idx_after_clipping(tokenizer, tmp_path: Path) -> None:
    table = _table(tmp_path, "musique_ans/dev.jsonl", "musique", 6, shuffle_paragraphs=True)
    rows = _rows(tokenizer, table, tmp_path, max_paragraph_tokens=30, max_length=400)
    batch = PaddingCollator(tokenizer.pad_token_id, tokenizer.sep_token_id)([rows[i] for i in range(len(rows))])
    batch["feature_row"] = torch.arange(len(rows))
    tokens = batch["input_ids"].shape[1]
    outputs = {
        "start_logits": torch.zeros(len(rows), tokens),
        "end_logits": torch.zeros(len(rows), tokens),
        # a reader that is sure of the gold paragraphs: logit +5 on supporting markers, -5 elsewhere
        "support_logits": batch["support_labels"] * 10 - 5,
        "answerable_logit": torch.full((len(rows),), 10.0),
        "type_logits": torch.zeros(len(rows), 3),
    }
    windows, markers = window_outputs(batch, outputs, max_answer_tokens=30)
    predictions = decode_predictions(windows, markers, table["id"], lambda row: "")
    for prediction, example in zip(predictions, table):
        gold = sorted(p["idx"] for p in example["paragraphs"] if p["is_supporting"])
        assert prediction.predicted_support_idxs == gold
        assert [p["idx"] for p in example["paragraphs"]] != sorted(p["idx"] for p in example["paragraphs"])


def test_reader_needs_a_longformer_and_global_attention(compose_train_cfg) -> None:
    with pytest.raises(BackboneError, match="needs a Longformer"):
        End2EndReader(instantiate(compose_train_cfg(["backbone=tiny"]).backbone), 30523)
    reader = End2EndReader(instantiate(compose_train_cfg(["backbone=tiny_longformer"]).backbone), 30523)
    assert reader.encoder.is_activation_checkpointing
    with pytest.raises(ValueError, match="global_attention_mask"):
        reader.encode(torch.ones(1, 8, dtype=torch.long), torch.ones(1, 8, dtype=torch.long))


@pytest.mark.slow
@pytest.mark.parametrize("dataset", DATASET_CONFIGS)
def test_fast_dev_run_end2end_on_every_sample(dataset: str, compose_train_cfg, tmp_path: Path) -> None:
    cfg = compose_train_cfg([f"dataset={dataset}", "model=end2end", "trainer.fast_dev_run=true", *TINY_END2END])
    assert isinstance(instantiate_recipe(cfg), End2End)
    train(cfg)
    run = tmp_path / "run"
    predictions = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    metrics = json.loads((run / "metrics.json").read_text())
    assert len(predictions) == 4 * (2 if dataset == "musique_full" else 1)
    assert 0.0 <= metrics["answer_f1"] <= 1.0 and ("group_answer_sufficiency_f1" in metrics) == (
        dataset == "musique_full"
    )
    assert (run / "end2end" / "stage.json").exists()


def test_fast_dev_run_c_only(compose_train_cfg, tmp_path: Path) -> None:
    cfg = compose_train_cfg(["model=c_only", "trainer.fast_dev_run=true", *TINY_END2END])
    train(cfg)
    assert (tmp_path / "run" / "c_only" / "stage.json").exists()
    assert len((tmp_path / "run" / "predictions.jsonl").read_text().splitlines()) == 4
