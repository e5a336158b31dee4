"""The Q-only answerer: only the question reaches the encoder, its labels, a tiny BART that memorises real sample
answers (and a separable answerability labelling) and survives a checkpoint round trip, and a confidence that is
the generated answer's probability under the model."""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

import datasets
import pytest
import pytorch_lightning as pl
import torch
from hydra.utils import instantiate

from musique_models.data.schema import Example
from musique_models.errors import MusiqueModelsError
from musique_models.evaluation.gold import ValidationGold, gold_from_example
from musique_models.features.question_only import NO_TARGET, featurize_question_only
from musique_models.models.backbone import load_tokenizer
from musique_models.models.decoding import clean_wordpiece_text, decode_answers
from musique_models.models.question_only import QuestionOnlyAnswerer
from musique_models.training.datamodule import QADataModule, featurize
from musique_models.training.inference import BatchPredictor
from musique_models.training.loaders import PaddingCollator

SETTINGS = {"max_question_tokens": 100, "max_answer_tokens": 30}
# tiny_bart at its learning rate (1e-2), one batch of 6 rows a step: the 4 answers are memorised well before this
MEMORISE_EPOCHS = 60


def _key(text: str) -> str:
    """What an uncased WordPiece decode keeps: no case, no accents, no spacing."""
    stripped = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
    return "".join(stripped.lower().split())


@pytest.fixture
def setup(compose_train_cfg) -> dict[str, Any]:
    """The tiny_bart spec, its tokenizer, the CPU run config and the MuSiQue-Full sample's dev rows."""
    cfg = compose_train_cfg(["dataset=musique_full", "dataset.sample=true", "backbone=tiny_bart", "trainer=cpu"])
    spec = instantiate(cfg.backbone)
    return {
        "cfg": cfg,
        "spec": spec,
        "tokenizer": load_tokenizer(spec),
        "table": instantiate(cfg.dataset).load("dev").select(range(12)),  # 6 twins: 6 answerable, 6 not
    }


def _module(setup: dict[str, Any], **kwargs: Any) -> QuestionOnlyAnswerer:
    tokenizer = setup["tokenizer"]
    return QuestionOnlyAnswerer(setup["spec"], len(tokenizer), tokenizer.pad_token_id, **kwargs)


def _collate(setup: dict[str, Any], features: datasets.Dataset) -> dict[str, torch.Tensor]:
    return PaddingCollator(setup["tokenizer"].pad_token_id)([features[row] for row in range(len(features))])


def test_only_the_question_reaches_the_encoder(setup) -> None:
    tokenizer, table = setup["tokenizer"], setup["table"]
    features = featurize(table, featurize_question_only, tokenizer, None, "q-only", **SETTINGS)
    assert set(features.column_names) == {"input_ids", "attention_mask", "labels", "answerable", "example_row"}
    expected = [tokenizer(question, truncation=True, max_length=102)["input_ids"] for question in table["question"]]
    for row, example in enumerate(table):
        assert features[row]["input_ids"] == expected[row] and features[row]["attention_mask"] == [1] * len(
            expected[row]
        )
        source = tokenizer.decode(features[row]["input_ids"], skip_special_tokens=True)
        assert _key(source) == _key(tokenizer.decode(expected[row], skip_special_tokens=True))
        for paragraph in example["paragraphs"]:
            assert _key(paragraph["text"])[:40] not in _key(source)

    torch.manual_seed(0)
    module = _module(setup, answerability_head=True, num_beams=2, max_answer_tokens=4)
    seen: list[list[list[int]]] = []  # per encoder call: the unpadded input ids of each row

    def record(_: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        seen.append([row[: int(length)].tolist() for row, length in zip(ids, mask.sum(dim=1))])

    hook = module.model.get_encoder().register_forward_pre_hook(record, with_kwargs=True)
    try:
        outputs = BatchPredictor(module, tokenizer, setup["cfg"], batch_size=5).outputs(features)
    finally:
        hook.remove()
    assert len(seen) == len(outputs) == 3  # the encoder runs once per batch: generation reuses its states
    rows_seen = []
    for call, output in zip(seen, outputs, strict=True):
        for ids, row in zip(call, output["example_row"].tolist(), strict=True):
            assert ids == expected[row]
            rows_seen.append(row)
    assert sorted(rows_seen) == list(range(len(table)))


def test_labels_are_the_answer_or_nothing(setup) -> None:
    tokenizer, table = setup["tokenizer"], setup["table"]
    features = featurize(table, featurize_question_only, tokenizer, None, "q-only", **SETTINGS)
    assert sorted(features["answerable"]) == [0] * 6 + [1] * 6
    for row, example in enumerate(table):
        labels = features[row]["labels"]
        assert features[row]["answerable"] == int(example["answerable"]) and features[row]["example_row"] == row
        if example["answerable"]:
            assert labels[0] == tokenizer.cls_token_id and labels[-1] == tokenizer.sep_token_id
            assert _key(tokenizer.decode(labels, skip_special_tokens=True)) == _key(example["answer"])
        else:
            assert labels == NO_TARGET
    clipped = featurize_question_only(
        {"question": ["Who?"], "answer": ["one two three four five"], "answerable": [True]},
        [0],
        tokenizer,
        max_question_tokens=100,
        max_answer_tokens=2,
    )
    assert tokenizer.decode(clipped["labels"][0]) == "[CLS] one two [SEP]"
    # an unlabelled row (answer "", answerable true) featurises: its target is the end token alone
    unlabelled = featurize_question_only(
        {"question": ["Who?"], "answer": [""], "answerable": [True]}, [0], tokenizer, **SETTINGS
    )
    assert unlabelled["labels"] == [[tokenizer.cls_token_id, tokenizer.sep_token_id]]

    # a batch of unanswerable rows alone: no generation loss (not NaN), the answerability loss, and a gradient
    # for every parameter (DDP): 0 for the seq2seq model (the head reads the encoder through a stop-gradient)
    torch.manual_seed(0)
    module = _module(setup, answerability_head=True).eval()  # no dropout: the two encodings below agree
    batch = _collate(setup, features.filter(lambda row: not row["answerable"]))
    assert batch["labels"].eq(-100).all()
    loss = module.loss(batch)
    hidden = module.encode(batch)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(
        module.answerable_logit(hidden, batch["attention_mask"]), torch.zeros(len(hidden))
    )
    assert torch.allclose(loss, expected)
    loss.backward()
    assert all(parameter.grad is not None for parameter in module.parameters())
    assert all(parameter.grad.eq(0).all() for parameter in module.model.parameters())
    assert module.answerable_head.weight.grad.ne(0).any()


def _teacher_forced_confidence(module: QuestionOnlyAnswerer, batch: dict, ids: torch.Tensor) -> torch.Tensor:
    """exp(summed log-probability) of each generated row (start token given; up to and with the end token), from
    one teacher-forced forward pass of the plain seq2seq model over the generated ids."""
    logits = module.model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=ids
    ).logits  # (B, L, V)
    log_probs = logits[:, :-1].double().log_softmax(dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, L-1)
    summed = torch.zeros(len(ids), dtype=torch.float64)
    for row in range(len(ids)):
        for position, token in enumerate(ids[row, 1:].tolist()):
            summed[row] += log_probs[row, position]
            if token == module.end_token_id:
                break
    return summed.exp()


def _assert_confidences(module: QuestionOnlyAnswerer, batch: dict) -> torch.Tensor:
    with torch.inference_mode():
        output = module.eval().predict_step(batch, 0)
        reference = _teacher_forced_confidence(module, batch, output["ids"])
    confidence = output["confidence"]
    assert ((confidence > 0) & (confidence <= 1)).all()
    assert torch.allclose(confidence.log(), reference.log(), atol=1e-4), (confidence, reference)
    return confidence


@pytest.mark.parametrize("num_beams", [1, 3])
def test_confidence_is_the_answers_probability(setup, num_beams: int) -> None:
    features = featurize(setup["table"], featurize_question_only, setup["tokenizer"], None, "q-only", **SETTINGS)
    torch.manual_seed(0)
    module = _module(setup, num_beams=num_beams, max_answer_tokens=6)
    _assert_confidences(module, _collate(setup, features.select(range(5))))
    output = module.predict_step(_collate(setup, features.select(range(2))), 0)
    assert output["answerable_prob"].tolist() == [1.0, 1.0]  # no head: always answerable


@pytest.mark.slow
def test_tiny_bart_memorises_answers_and_answerability_and_reloads(setup, tmp_path: Path) -> None:
    tokenizer, table = setup["tokenizer"], setup["table"]
    # 4 answerable questions, and 2 OTHER questions labelled unanswerable (their twins left out: twins share the
    # question, so only a labelling that differs between questions is learnable from the question alone)
    answerable = [row for row in range(len(table)) if table[row]["answerable"]]
    unanswerable = [row for row in range(len(table)) if not table[row]["answerable"]]
    used = table.select(answerable[:4] + unanswerable[4:6])
    assert len(set(used["id"])) == 6
    features = featurize(used, featurize_question_only, tokenizer, tmp_path, "q-only-train", **SETTINGS)
    pl.seed_everything(0)
    golds = [gold_from_example(Example.from_dict(row), i) for i, row in enumerate(used)]
    validation = ValidationGold(golds, paired=False)  # the twins are not both here
    module = _module(setup, answerability_head=True, lr=setup["spec"].learning_rate, validation=validation)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=MEMORISE_EPOCHS,
        check_val_every_n_epoch=MEMORISE_EPOCHS,  # validate once, at the end, with the evaluator's metrics
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=1.0,
    )
    data = QADataModule.for_tokenizer(tokenizer, features, features, batch_size=6, eval_batch_size=6)
    trainer.fit(module, datamodule=data)
    metrics = trainer.callback_metrics
    assert metrics["val/answer_em"] == 1.0 and metrics["val/answer_f1"] == 1.0
    assert metrics["val/sufficiency_accuracy"] == 1.0

    batch = _collate(setup, features)
    confidence = _assert_confidences(module, batch)
    output = module.predict_step(batch, 0)
    answers = decode_answers(tokenizer, output["ids"])
    for answer, example in zip(answers[:4], used.select(range(4))):
        assert _key(answer) == _key(example["answer"])
    assert (confidence[:4] > 0.3).all()  # memorised: the answers are likely under the model
    assert output["answerable_prob"][:4].gt(0.5).all() and output["answerable_prob"][4:].lt(0.5).all()

    checkpoint = tmp_path / "q_only.ckpt"
    trainer.save_checkpoint(checkpoint)
    reloaded = QuestionOnlyAnswerer.load_from_checkpoint(checkpoint, map_location="cpu").eval()
    assert reloaded.answerability_head and reloaded.hparams.backbone == setup["spec"]
    again = reloaded.predict_step(batch, 0)
    assert torch.equal(again["ids"], output["ids"]) and torch.equal(again["confidence"], output["confidence"])


@pytest.mark.parametrize(
    ("decoded", "clean"),
    [
        ("land - grant university", "land-grant university"),
        ("6. 8 inches", "6.8 inches"),
        ("harvest : 3, 000 years", "harvest : 3,000 years"),
        ("april 5, 1975", "april 5, 1975"),
        ("hudson ' s bay", "hudson's bay"),
        ("o ' neil", "o'neil"),
        ("u. s. navy", "u.s. navy"),
        ("st. louis", "st. louis"),
    ],
)
def test_wordpiece_decoding_glues_in_word_punctuation(decoded: str, clean: str) -> None:
    assert clean_wordpiece_text(decoded) == clean


def test_decoded_answers_are_clean_text(setup) -> None:
    tokenizer = setup["tokenizer"]
    answers = ["Land-grant university", "6.8 inches", "Hudson's Bay", "3,000"]
    ids = [tokenizer(answer)["input_ids"] + [tokenizer.pad_token_id] * 2 for answer in answers]
    assert decode_answers(tokenizer, ids) == [answer.lower() for answer in answers]


def test_a_module_built_without_the_gold_says_so_when_it_validates(setup) -> None:
    module = _module(setup)
    with pytest.raises(MusiqueModelsError, match="scores its validation epochs against the evaluation split's gold"):
        module.on_validation_epoch_start()
    validation = ValidationGold([], paired=False)
    assert "validation" not in _module(setup, validation=validation).hparams  # never saved in a checkpoint
