"""The question decomposer: the official step-token format, its features, its scores, the seq2seq backbones, and a
tiny BART that memorises real MuSiQue decompositions and survives a checkpoint round trip."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

import datasets
import pytest
import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from transformers import AutoModel

from musique_models.data.single_hop import fill_references
from musique_models.errors import MusiqueModelsError
from musique_models.features.context import FeaturizationError
from musique_models.features.decomposer import add_decomposition_tokens, featurize_decomposer
from musique_models.features.decomposition import (
    DECOMPOSITION_TOKENS,
    decomposition_text,
    parse_decomposition,
    references,
)
from musique_models.models.backbone import BackboneSpec, load_seq2seq, load_tokenizer
from musique_models.models.decomposer import (
    QuestionDecomposer,
    SequenceCollector,
    decomposition_scores,
    load_decomposer_tokenizer,
)
from musique_models.training.datamodule import QADataModule, featurize
from musique_models.training.loaders import PaddingCollator
from tests.conftest import SAMPLES

RECORDS = json.loads((SAMPLES / "musique_ans/train.json").read_text())
# tiny_bart at its learning rate memorises the 4 decompositions by epoch 60 (exact match 0.5 at 40)
MEMORISE_EPOCHS = 80


def _steps(record: dict[str, Any]) -> list[str]:
    return [step["question"] for step in record["question_decomposition"]]


def _first_with_hops(hops: int) -> dict[str, Any]:
    return next(record for record in RECORDS if len(record["question_decomposition"]) == hops)


def _backbone(compose_train_cfg, name: str) -> BackboneSpec:
    return instantiate(compose_train_cfg([f"backbone={name}"]).backbone)


def test_official_tokens_in_the_official_order() -> None:
    assert DECOMPOSITION_TOKENS[:4] == [
        "[[CQS]] 0 [[CQE]]",
        "[[RQS]] 0 [[RQE]]",
        "[[CQS]] 1 [[CQE]]",
        "[[RQS]] 1 [[RQE]]",
    ]
    assert len(DECOMPOSITION_TOKENS) == 10 and DECOMPOSITION_TOKENS[-1] == "[[RQS]] 4 [[RQE]]"


def test_real_decompositions_of_2_3_and_4_hops_round_trip() -> None:
    brand = next(record for record in RECORDS if record["id"] == "2hop__468258_495107")
    assert decomposition_text(_steps(brand)) == (
        "[[CQS]] 0 [[CQE]] Brand >> author [[CQS]] 1 [[CQE]] [[RQS]] 0 [[RQE]] >> country of citizenship"
    )
    publix = _first_with_hops(4)
    assert decomposition_text(_steps(publix)).endswith(
        "[[CQS]] 3 [[CQE]] how many publix stores are in [[RQS]] 2 [[RQE]]"
    )
    assert {len(record["question_decomposition"]) for record in RECORDS} == {2, 3, 4}
    for record in RECORDS:
        steps = [" ".join(step.split()) for step in _steps(record)]
        text = decomposition_text(steps)
        assert "#" not in text and text.count("[[CQS]]") == len(steps)
        parsed = parse_decomposition(text)
        assert (parsed.steps, parsed.invalid, parsed.problems) == (steps, False, []), record["id"]


@pytest.mark.parametrize(
    ("text", "steps", "problems"),
    [
        (
            "[[CQS]] 0 [[CQE]] who wrote [[RQS]] 1 [[RQE]] [[CQS]] 1 [[CQE]] where is [[RQS]] 1 [[RQE]] ?",
            ["who wrote #2", "where is #2 ?"],
            [
                "step 0 refers to [[RQS]] 1 [[RQE]], a later step's answer",
                "step 1 refers to [[RQS]] 1 [[RQE]], its own answer",
            ],
        ),
        (
            "[[CQS]] 0 [[CQE]] Brand >> author [[CQS]] 1 [[CQE]] [[RQS]] 3 [[RQE]] >> country",
            ["Brand >> author", "#4 >> country"],
            ["step 1 refers to [[RQS]] 3 [[RQE]], which is no step"],
        ),
        ("  Who wrote   Brand?  ", ["Who wrote Brand?"], ["no [[CQS]] i [[CQE]] marker: one step"]),
        (
            "who wrote [[RQS]] 0 [[RQE]]",
            ["who wrote #1"],
            ["no [[CQS]] i [[CQE]] marker: one step", "step 0 refers to [[RQS]] 0 [[RQE]], its own answer"],
        ),
        ("", [""], ["empty text"]),
        ("   ", [""], ["empty text"]),
        ("[[CQS]] 0 [[CQE]] [[CQS]] 1 [[CQE]] Brand >> author", ["", "Brand >> author"], ["step 0 is empty"]),
    ],
)
def test_invalid_decompositions_say_what_is_wrong(text: str, steps: list[str], problems: list[str]) -> None:
    parsed = parse_decomposition(text)
    assert (parsed.steps, parsed.invalid, parsed.problems) == (steps, True, problems)


def test_parsing_drops_text_before_the_first_step_and_ignores_marker_numbers() -> None:
    parsed = parse_decomposition("<s> noise [[CQS]] 3 [[CQE]] Brand >> author [[CQS]] 0 [[CQE]] [[RQS]] 0 [[RQE]] >> x")
    assert (parsed.steps, parsed.invalid) == (["Brand >> author", "#1 >> x"], False)


def test_parsing_tolerates_decoded_case_and_spacing() -> None:
    decoded = "[[cqs]] 0 [[cqe]] brand > > author [[ CQS ]]1[[cqe]][[rqs]]0 [[ rqe ]] > > country [[CQS]] 2 [[CQE]] in [[RQS]] 1 [[RQE]]5"
    parsed = parse_decomposition(decoded)
    assert parsed.steps == ["brand > > author", "#1 > > country", "in #2 5"] and not parsed.invalid


def test_decomposition_text_refuses_what_the_official_tokens_cannot_write() -> None:
    with pytest.raises(ValueError, match="6 steps"):
        decomposition_text([f"q{i}" for i in range(6)])
    with pytest.raises(ValueError, match="#6"):
        decomposition_text(["a", "b of #6"])
    with pytest.raises(ValueError, match="#0"):
        decomposition_text(["a", "b of #0"])


@pytest.mark.parametrize("hops", [2, 3, 4])
def test_gold_answers_substituted_along_real_chains(hops: int) -> None:
    record = _first_with_hops(hops)
    answers = [step["answer"] for step in record["question_decomposition"]]
    for number, step in enumerate(_steps(record), start=1):
        assert all(k < number for k in references(step))
        substituted = fill_references(step, answers[: number - 1])
        assert "#" not in substituted and all(answers[k - 1] in substituted for k in references(step))
    if hops == 4:  # Hello Love's performer's death state's eastern neighbour
        assert fill_references(_steps(record)[3], answers[:3]) == "how many publix stores are in North Carolina"


def test_substitution_matches_whole_numbers_and_drops_missing_answers() -> None:
    answers = [chr(ord("a") + i) for i in range(12)]
    assert fill_references("#12 and #1 , not #1x", answers) == "l and a , not ax"
    assert fill_references("Who founded  #2 ?", ["Norway"]) == "Who founded ?"
    assert fill_references("#0 of #1", ["Norway"]) == "of Norway"
    assert references("#2 of #1 and #12 #2") == [2, 1, 12]


def test_step_tokens_are_single_ids_and_decoded_labels_parse_back(compose_train_cfg) -> None:
    tokenizer = load_decomposer_tokenizer(_backbone(compose_train_cfg, "minilm"))
    plain = load_tokenizer(_backbone(compose_train_cfg, "minilm"))
    ids = [tokenizer.encode(token, add_special_tokens=False) for token in DECOMPOSITION_TOKENS]
    assert ids == [[len(plain) + i] for i in range(10)]
    add_decomposition_tokens(tokenizer)  # again: nothing changes
    assert len(tokenizer) == len(plain) + 10

    def key(text: str) -> str:  # what an uncased WordPiece decode keeps: no case, no accents, no spacing
        stripped = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        return "".join(stripped.lower().split())

    records = [_first_with_hops(hops) for hops in (2, 3, 4)]
    batch = {
        "question": [r["question"] for r in records],
        "decomposition": [r["question_decomposition"] for r in records],
    }
    features = featurize_decomposer(batch, [0, 1, 2], tokenizer, max_source_tokens=100, max_target_tokens=100)
    for record, labels in zip(records, features["labels"]):
        parsed = parse_decomposition(tokenizer.decode(labels, skip_special_tokens=True))
        assert not parsed.invalid
        assert [key(step) for step in parsed.steps] == [key(step) for step in _steps(record)]


def test_featurizer_columns_clipping_and_refusals(compose_train_cfg) -> None:
    spec = _backbone(compose_train_cfg, "minilm")
    tokenizer = load_decomposer_tokenizer(spec)
    records = [_first_with_hops(4), _first_with_hops(2)]
    batch = {
        "id": [r["id"] for r in records],
        "question": [r["question"] for r in records],
        "decomposition": [r["question_decomposition"] for r in records],
    }
    full = featurize_decomposer(batch, [7, 9], tokenizer, max_source_tokens=100, max_target_tokens=100)
    clipped = featurize_decomposer(batch, [7, 9], tokenizer, max_source_tokens=5, max_target_tokens=8)
    assert set(full) == {"input_ids", "labels", "example_row"} and full["example_row"] == [7, 9]
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    for source, target in zip(full["input_ids"], full["labels"]):
        assert source[0] == target[0] == cls and source[-1] == target[-1] == sep
        assert target[1] == tokenizer.convert_tokens_to_ids("[[CQS]] 0 [[CQE]]")
    for (source, target), (long_source, long_target) in zip(
        zip(clipped["input_ids"], clipped["labels"]), zip(full["input_ids"], full["labels"])
    ):
        assert source == long_source[:6] + [sep]  # 5 text tokens plus [CLS] and [SEP]
        assert target == long_target[:7] + [sep]  # 8 tokens in all, still closed by [SEP]

    hotpot = {**batch, "decomposition": [records[0]["question_decomposition"], []]}
    with pytest.raises(FeaturizationError, match=records[1]["id"]):
        featurize_decomposer(hotpot, [0, 1], tokenizer, max_source_tokens=100, max_target_tokens=100)
    with pytest.raises(ValueError, match="add_decomposition_tokens"):
        featurize_decomposer(batch, [0, 1], load_tokenizer(spec), max_source_tokens=100, max_target_tokens=100)

    collated = PaddingCollator(tokenizer.pad_token_id)([{key: full[key][row] for key in full} for row in range(2)])
    short = len(full["labels"][1])
    assert collated["labels"][1, short:].eq(-100).all() and collated["labels"][1, :short].ge(0).all()
    assert collated["attention_mask"].sum(dim=1).tolist() == [len(ids) for ids in full["input_ids"]]


def test_decomposition_scores_match_hand_computed_bleu_and_exact_match() -> None:
    start, end, pad = 101, 102, 0
    excluded = {start, end, pad}
    same = decomposition_scores([[start, 1, 2, 3, 4, 5, 6, end, pad]], [[start, 1, 2, 3, 4, 5, 6, end, -100]], excluded)
    assert same == {"bleu": pytest.approx(100.0), "exact_match": 1.0}
    # second row: n-gram precisions 11/12, 9/10, 7/8, 5/6 over the corpus, no brevity penalty
    one_off = decomposition_scores(
        [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]], [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 7]], excluded
    )
    assert one_off["exact_match"] == 0.5
    assert one_off["bleu"] == pytest.approx(100 * (11 / 12 * 9 / 10 * 7 / 8 * 5 / 6) ** 0.25)
    short = decomposition_scores([[1, 2, 3, 4]], [[1, 2, 3, 4, 5, 6]], excluded)  # brevity penalty exp(1 - 6/4)
    assert short["bleu"] == pytest.approx(100 * torch.tensor(-0.5).exp().item(), rel=1e-6)
    # no 3-gram in common: 0, as AllenNLP's unsmoothed BLEU
    assert decomposition_scores([[1, 2, 9, 3, 4, 9]], [[1, 2, 3, 4, 5, 6]], excluded)["bleu"] == 0.0
    assert decomposition_scores([], [], excluded) == {"bleu": 0.0, "exact_match": 0.0}


def test_sequence_collector_drops_repeated_rows_and_padding() -> None:
    collector = SequenceCollector(width=5)
    collector.update(
        torch.tensor([3, 1]),
        torch.tensor([[101, 7, 102], [101, 8, 102]]),
        torch.tensor([[101, 7, 102, -100], [101, 8, 9, 102]]),
    )
    collector.update(torch.tensor([3]), torch.tensor([[101, 5, 102]]), torch.tensor([[101, 5, 102, -100]]))  # a repeat
    assert collector.compute() == ([[101, 8, 102], [101, 7, 102]], [[101, 8, 9, 102], [101, 7, 102]])
    with pytest.raises(ValueError, match="max_target_tokens"):
        collector.update(torch.tensor([0]), torch.zeros(1, 6, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long))


def test_bert2bert_is_warm_started_from_minilm_on_both_sides(compose_train_cfg) -> None:
    spec = _backbone(compose_train_cfg, "minilm_bert2bert")
    minilm_spec = _backbone(compose_train_cfg, "minilm")
    assert spec.model_dir() == minilm_spec.model_dir()
    tokenizer = load_decomposer_tokenizer(spec)
    model = load_seq2seq(spec, len(tokenizer), tokenizer)
    minilm = AutoModel.from_pretrained(minilm_spec.model_dir())
    assert model.training and model.encoder.pooler is None
    words = minilm.embeddings.word_embeddings.weight
    for half in (model.encoder, model.decoder.bert):
        assert half.get_input_embeddings().weight.shape[0] == len(tokenizer)
        assert torch.equal(half.get_input_embeddings().weight[: len(words)], words)
    encoder_weights = dict(model.encoder.named_parameters())
    for name, weight in minilm.named_parameters():
        if name.startswith("encoder.") or name.startswith("embeddings.") and "word_embeddings" not in name:
            assert torch.equal(encoder_weights[name], weight), name
            assert torch.equal(model.decoder.bert.get_parameter(name), weight), name
    assert model.decoder.config.is_decoder and model.decoder.config.add_cross_attention
    assert all(layer.crossattention is not None for layer in model.decoder.bert.encoder.layer)
    assert model.generation_config.decoder_start_token_id == tokenizer.cls_token_id
    assert model.generation_config.eos_token_id == tokenizer.sep_token_id

    question = tokenizer(["What country was the author of Brand a citizen of?"], return_tensors="pt")
    generated = model.eval().generate(**question, num_beams=2, max_new_tokens=6, early_stopping=True)
    assert generated.shape[0] == 1 and 2 <= generated.shape[1] <= 7 and generated[0, 0] == tokenizer.cls_token_id


def test_decomposer_refuses_a_tokenizer_without_the_step_tokens(compose_train_cfg) -> None:
    spec = _backbone(compose_train_cfg, "tiny_bart")
    plain = load_tokenizer(spec)
    with pytest.raises(MusiqueModelsError, match="load_decomposer_tokenizer"):
        QuestionDecomposer(spec, len(plain), plain.pad_token_id)


def test_loss_predicts_each_target_token_from_the_ones_before(compose_train_cfg) -> None:
    """Without label smoothing the loss is BART's own cross-entropy of labels[1:] given labels[:-1]."""
    spec = _backbone(compose_train_cfg, "tiny_bart")
    tokenizer = load_decomposer_tokenizer(spec)
    torch.manual_seed(0)
    decomposer = QuestionDecomposer(spec, len(tokenizer), tokenizer.pad_token_id, label_smoothing=0.0).eval()
    records = [_first_with_hops(2), _first_with_hops(3)]
    batch = {
        "question": [r["question"] for r in records],
        "decomposition": [r["question_decomposition"] for r in records],
    }
    features = featurize_decomposer(batch, [0, 1], tokenizer, max_source_tokens=100, max_target_tokens=100)
    collated = PaddingCollator(tokenizer.pad_token_id)([{k: features[k][i] for k in features} for i in range(2)])
    labels = collated["labels"]
    reference = decomposer.model(
        input_ids=collated["input_ids"],
        attention_mask=collated["attention_mask"],
        decoder_input_ids=labels[:, :-1].clamp(min=0),
        decoder_attention_mask=(labels[:, :-1] >= 0).long(),
        labels=labels[:, 1:].contiguous(),
    ).loss
    assert torch.allclose(decomposer.loss(collated), reference, atol=1e-6)


@pytest.mark.slow
def test_tiny_bart_memorises_real_decompositions_and_reloads(compose_train_cfg, tmp_path: Path) -> None:
    spec = _backbone(compose_train_cfg, "tiny_bart")
    tokenizer = load_decomposer_tokenizer(spec)
    records = [_first_with_hops(2), _first_with_hops(3), _first_with_hops(4), RECORDS[2]]
    table = datasets.Dataset.from_dict(
        {
            "id": [r["id"] for r in records],
            "question": [r["question"] for r in records],
            "decomposition": [r["question_decomposition"] for r in records],
        }
    )
    features = featurize(
        table, featurize_decomposer, tokenizer, tmp_path, "train", max_source_tokens=100, max_target_tokens=100
    )
    pl.seed_everything(0)
    decomposer = QuestionDecomposer(spec, len(tokenizer), tokenizer.pad_token_id, lr=spec.learning_rate)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=MEMORISE_EPOCHS,
        check_val_every_n_epoch=MEMORISE_EPOCHS,  # validate once, at the end
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=1.0,
    )
    data = QADataModule.for_tokenizer(tokenizer, features, features, batch_size=4, eval_batch_size=4)
    trainer.fit(decomposer, datamodule=data)
    assert trainer.callback_metrics["val/exact_match"] == 1.0
    assert trainer.callback_metrics["val/bleu"] == pytest.approx(100.0)

    checkpoint = tmp_path / "decomposer.ckpt"
    trainer.save_checkpoint(checkpoint)
    reloaded = QuestionDecomposer.load_from_checkpoint(checkpoint, map_location="cpu").eval()
    batch = PaddingCollator(tokenizer.pad_token_id)([features[row] for row in range(len(features))])
    generated = decomposer.eval().predict_step(batch, 0)
    assert torch.equal(reloaded.generate_ids(batch), generated["ids"])
    assert generated["example_row"].tolist() == [0, 1, 2, 3]
    texts = tokenizer.batch_decode(generated["ids"], skip_special_tokens=True)
    for record, text in zip(records, texts):
        assert len(parse_decomposition(text).steps) == len(record["question_decomposition"])
