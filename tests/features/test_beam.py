"""Beam Retrieval's features: hops from the question type (never from the gold), the gold chain in decomposition or
dataset order, the authors' token layout and per-hop budgets, and the collated batch unpacked back to questions."""

from __future__ import annotations

import pytest
from hydra.utils import instantiate

from musique_models.features.beam import featurize_beam, gold_chain, hop_budget, hop_count, hop_input
from musique_models.models.backbone import load_tokenizer
from musique_models.models.beam_retriever import unpack_questions
from musique_models.training.loaders import PaddingCollator
from tests.cli.test_score_run import compose_cfg


@pytest.mark.parametrize(
    ("question_type", "hops"),
    [("2hop", 2), ("3hop1", 3), ("3hop2", 3), ("4hop3", 4), ("bridge_comparison", 4), ("comparison", 2), ("", 2)],
)
def test_the_hops_to_retrieve_come_from_the_question_type(question_type: str, hops: int) -> None:
    assert hop_count(question_type) == hops


def _row(supporting: list[int], steps: list[int | None], answerable: bool = True) -> dict:
    return {
        "answerable": answerable,
        "paragraphs": [{"idx": idx, "is_supporting": idx in supporting} for idx in range(6)],
        "decomposition": [{"paragraph_support_idx": step} for step in steps],
    }


def test_the_gold_chain_follows_the_decomposition_when_ordered_and_the_dataset_otherwise() -> None:
    row = _row([1, 4, 5], [5, 1, 4])
    assert gold_chain(row, label_order=True) == [5, 1, 4]
    assert gold_chain(row, label_order=False) == [1, 4, 5]
    # a decomposition that does not name every supporting paragraph (2Wiki's derived steps) falls back
    assert gold_chain(_row([1, 4], [4, None]), label_order=True) == [1, 4]
    assert gold_chain(_row([1, 4], [4, 1], answerable=False), label_order=True) == []


def test_hop_budgets_are_the_authors_and_hop_inputs_clip_at_them() -> None:
    # 512 tokens, a 10-token question, 3 hops: each later hop keeps room for (510 - 10) // 3 = 166 tokens
    assert [hop_budget(512, 10, 3, hop) for hop in range(3)] == [510 - 2 * 166, 510 - 166, 510]
    assert hop_input([1, 2], [3, 4], [5, 6, 7], budget=6) == [1, 2, 3, 4, 5, 6]
    assert hop_input([1, 2], [3, 4], [5, 6, 7], budget=6, candidate_first=True) == [1, 2, 5, 6, 7, 3]


def test_featurised_questions_hold_the_authors_texts_and_unpack_from_a_collated_batch() -> None:
    cfg = compose_cfg("train", ["dataset.sample=true", "backbone=tiny"])
    table = instantiate(cfg.dataset).load("train").select(range(3))
    tokenizer = load_tokenizer(instantiate(cfg.backbone))
    out = featurize_beam(table[:3], [0, 1, 2], tokenizer, max_length=64, label_order=True)
    first = table[0]
    question = first["question"].strip().rstrip("?")
    assert out["input_ids"][0] == tokenizer.encode(question, add_special_tokens=False)
    lengths = out["candidate_lengths"][0]
    assert len(lengths) == len(first["paragraphs"]) and sum(lengths) == len(out["candidate_tokens"][0])
    paragraph = first["paragraphs"][0]
    expected = tokenizer.encode(f"{paragraph['title']}.{paragraph['text']}", add_special_tokens=False)
    assert out["candidate_tokens"][0][: lengths[0]] == expected[: 64 - len(out["input_ids"][0])]
    steps = [step["paragraph_support_idx"] for step in first["decomposition"]]
    assert [out["candidate_idx"][0][p] for p in out["gold_chain"][0]] == steps
    assert out["hops"] == [len(row["decomposition"]) for row in table]
    # a question keeps at most half of a hop input: the later hops' room stays positive
    short = featurize_beam(table[:3], [0, 1, 2], tokenizer, max_length=10, label_order=True)
    assert max(len(ids) for ids in short["input_ids"]) == 5 and hop_budget(10, 5, 4, 0) > 5
    rows = [{key: values[i] for key, values in out.items()} for i in range(3)]
    questions = unpack_questions(PaddingCollator(tokenizer.pad_token_id)(rows))
    for row, unpacked in zip(rows, questions, strict=True):
        assert unpacked.question == row["input_ids"] and unpacked.gold == row["gold_chain"]
        assert (
            unpacked.idxs == row["candidate_idx"] and [len(c) for c in unpacked.candidates] == row["candidate_lengths"]
        )
        assert sum(unpacked.candidates, []) == row["candidate_tokens"] and unpacked.hops == row["hops"]
