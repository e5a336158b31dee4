"""The 1-Para baseline (`model=one_para`): Select+Answer with K = 1 whose selector ranks the paragraphs that contain
the answer, checked against the raw sample files, and its runs on every sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra.utils import instantiate

from musique_models.evaluation.metrics import normalize_answer
from musique_models.features.context import YES_NO_PREFIX, build_context
from musique_models.features.selector import answer_paragraph_idxs, featurize_selector
from musique_models.models.backbone import load_tokenizer
from musique_models.recipes.build import instantiate_recipe
from musique_models.recipes.select_answer import SelectAnswer
from musique_models.runs.train import train
from musique_models.training.datamodule import featurize
from musique_models.training.run_folder import evaluation_subset
from tests.conftest import DATASET_CONFIGS, ONE_THREAD, SAMPLES

RAW_TRAIN = {
    "musique_ans": SAMPLES / "musique_ans" / "train.json",
    "musique_full": SAMPLES / "musique_full" / "train_derived.jsonl",
    "hotpotqa_20k": SAMPLES / "hotpotqa" / "train.json",
    "2wiki_20k": SAMPLES / "2wiki" / "train.json",
}


def raw_records(path: Path) -> list[dict]:
    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else [json.loads(line) for line in text.splitlines()]


def contains_words(text: str, words: list[str]) -> bool:
    tokens = normalize_answer(text).split()
    return any(tokens[start : start + len(words)] == words for start in range(len(tokens) - len(words) + 1))


def answer_paragraphs_from_raw(record: dict) -> set[int]:
    """Written from the raw official layout, independently of the readers and the featuriser: the paragraphs in
    whose normalised words the normalised answer (or an alias) occurs as a run of whole words, else the gold
    supporting ones."""
    answers = [normalize_answer(a).split() for a in [record["answer"], *record.get("answer_aliases", [])]]
    answers = [words for words in answers if words]
    if "paragraphs" in record:  # MuSiQue
        texts = {p["idx"]: p["paragraph_text"] for p in record["paragraphs"]}
        supporting = {p["idx"] for p in record["paragraphs"] if p["is_supporting"]}
    else:  # HotpotQA / 2Wiki: idx = position in `context`
        texts = {position: "".join(sentences) for position, (_, sentences) in enumerate(record["context"])}
        titles = {title for title, _ in record["supporting_facts"]}
        supporting = {position for position, (title, _) in enumerate(record["context"]) if title in titles}
    found = {idx for idx, text in texts.items() if any(contains_words(text, words) for words in answers)}
    return found or supporting


def test_containing_the_answer_means_whole_words() -> None:
    paragraphs = [
        {"idx": 0, "text": "Founded in 1920, thus the US...", "is_supporting": False},
        {"idx": 1, "text": "He had 2 sons.", "is_supporting": False},
        {"idx": 2, "text": "Nothing here.", "is_supporting": True},
    ]
    assert answer_paragraph_idxs(paragraphs, ["2"]) == [1]  # not "1920"
    assert answer_paragraph_idxs(paragraphs, ["U.S."]) == [0]  # normalised "us", a whole word
    assert answer_paragraph_idxs(paragraphs, ["yes"]) == [2]  # nowhere: the supporting paragraphs


@pytest.mark.slow
@pytest.mark.parametrize("dataset", DATASET_CONFIGS)
def test_one_para_selector_labels_are_the_answer_containing_paragraphs(dataset: str, compose_train_cfg) -> None:
    cfg = compose_train_cfg(
        [f"dataset={dataset}", "model=one_para", "backbone=tiny", "dataset.sample=true", "dataset.train_size=null"]
    )
    recipe = instantiate_recipe(cfg)
    assert isinstance(recipe, SelectAnswer) and recipe.top_k == 1 and recipe.selector_positives == "answer"
    table = instantiate(cfg.dataset).load("train")
    tokenizer = load_tokenizer(instantiate(cfg.backbone))
    pairs = featurize(table, featurize_selector, tokenizer, None, "pairs", max_length=64, positives="answer")
    labelled: dict[int, set[int]] = {row: set() for row in range(len(table))}
    for row, idx, label in zip(pairs["example_row"], pairs["paragraph_idx"], pairs["label"]):
        if label:
            labelled[row].add(idx)
    raw = raw_records(RAW_TRAIN[dataset])
    assert len(raw) == len(table)
    for row, record in enumerate(raw):
        assert table[row]["id"] == record.get("id", record.get("_id"))
        assert labelled[row] == answer_paragraphs_from_raw(record), record.get("id", record.get("_id"))
    # the labels are not the gold supporting set: Select+Answer's selector gets other ones on the same rows
    support_pairs = featurize(table, featurize_selector, tokenizer, None, "pairs", max_length=64)
    assert support_pairs["label"] != pairs["label"]


TINY_ONE_PARA = [
    "model=one_para",
    "backbone=tiny",
    "dataset.sample=true",
    "dataset.train_size=6",
    "eval_size=5",
    "trainer.fast_dev_run=true",
    "trainer.enable_progress_bar=false",
    ONE_THREAD,
    "model.eval_batch_size=64",
    "logger=none",
]


@pytest.mark.slow
@pytest.mark.parametrize("dataset", DATASET_CONFIGS)
def test_fast_dev_run_one_para_reads_one_paragraph_and_predicts_it_as_support(dataset: str, compose_train_cfg) -> None:
    cfg = compose_train_cfg([f"dataset={dataset}", *TINY_ONE_PARA])
    train(cfg)
    run = Path(cfg.paths.output_dir)
    predictions = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    ranking = json.loads((run / "selector_ranking.json").read_text())
    evaluation = evaluation_subset(instantiate(cfg.dataset).load("dev"), 5)  # eval_size=5: the run's 5 questions
    rows_per_question = 2 if dataset == "musique_full" else 1
    assert ranking["top_k"] == 1 and len(predictions) == 5 * rows_per_question
    for row, (prediction, ranked) in enumerate(zip(predictions, ranking["rankings"], strict=True)):
        assert prediction["id"] == evaluation[row]["id"] == ranked["id"]
        ranked = ranked["ranking"]
        assert prediction["predicted_support_idxs"] == ranked[:1]  # the paragraph read is the support
        # the answer is a span of that paragraph (with its title where the dataset shows titles) or of the prefix
        paragraph = next(p for p in evaluation[row]["paragraphs"] if p["idx"] == ranked[0])
        readable, _ = build_context([paragraph], bool(cfg.dataset.include_title), YES_NO_PREFIX)
        assert prediction["predicted_answer"] in readable
    metrics = json.loads((run / "metrics.json").read_text())
    assert ("group_answer_sufficiency_f1" in metrics) == (dataset == "musique_full")
