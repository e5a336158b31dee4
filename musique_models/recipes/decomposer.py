"""The question decomposer stage (`model=decomposer`, and the first stage of `model=step_execution`): a seq2seq
model that rewrites a multihop question into single-hop steps in the official step-token format
(`musique_models.features.decomposition`).

Trained on each training question's gold decomposition, validated on BLEU over token ids (the official
`+BLEU`) and exact match; its best checkpoint then decomposes the evaluation split's questions (beam search), once
per question id, into `decompositions.jsonl` in the run folder. `model=decomposer` stops there: the run's
`metrics.json` holds the decomposer's BLEU and exact match on the evaluation split (on a split with gold
decompositions), and no answers are predicted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
from hydra.utils import instantiate
from omegaconf import DictConfig

from musique_models.errors import ConfigValueError, MusiqueModelsError
from musique_models.features.decomposer import featurize_decomposer, featurize_decomposer_source
from musique_models.features.decomposition import ParsedDecomposition, decomposition_text, parse_decomposition
from musique_models.io import write_jsonl
from musique_models.models.backbone import BackboneSpec
from musique_models.models.decomposer import QuestionDecomposer, decomposition_scores, load_decomposer_tokenizer
from musique_models.recipes.base import RunContext
from musique_models.recipes.fitting import StageInputs, fit_stage
from musique_models.recipes.planning import (
    PREDICT,
    PlanError,
    PlanSplits,
    StagePlan,
    predict_work,
    seq2seq_component,
    seq2seq_stages,
)
from musique_models.run_files import DECOMPOSITIONS_FILE
from musique_models.training.datamodule import featurize
from musique_models.training.inference import BatchPredictor
from musique_models.training.stage import finished_checkpoint

log = logging.getLogger(__name__)

DECOMPOSER_MONITOR = "val/bleu"


def require_decompositions(context: RunContext, model_name: str) -> None:
    """Refuse a dataset without decompositions (HotpotQA) in one line."""
    if not any(len(steps) for steps in context.train["decomposition"]):
        raise ConfigValueError(
            f"model={model_name} needs question decompositions, and {context.source.display_name} has none: "
            "use dataset=musique_ans, musique_full or 2wiki_20k"
        )


@dataclass
class FittedDecomposer:
    """A trained decomposer and the tokenizer (with the ten step tokens) that feeds it."""

    module: QuestionDecomposer
    tokenizer: Any
    settings: dict[str, Any]


class DecomposerPredictor:
    """A trained decomposer placed once. `decompose` writes the decompositions of a table's questions;
    `predict` (the decomposer alone) predicts no answers: its `extra_metrics` are its scores."""

    def __init__(self, fitted: FittedDecomposer, cfg: DictConfig, batch_size: int) -> None:
        self.fitted = fitted
        self.batches = BatchPredictor(fitted.module, fitted.tokenizer, cfg, batch_size)
        self.extra_metrics: dict[str, float | int] = {}

    def generate(self, table: datasets.Dataset) -> list[str]:
        """The generated decomposition text of every row of `table` (beam search, `num_beams` of the module)."""
        tokenizer = self.fitted.tokenizer
        rows = featurize(table, featurize_decomposer_source, tokenizer, None, "decompose", **self.fitted.settings)
        texts = [""] * len(table)
        for output in self.batches.outputs(rows):
            decoded = tokenizer.batch_decode(output["ids"], skip_special_tokens=True)
            for row, text in zip(output["example_row"].tolist(), decoded):
                texts[row] = text
        return texts

    def decompose(
        self, table: datasets.Dataset, output_dir: Path
    ) -> tuple[dict[str, str], dict[str, ParsedDecomposition]]:
        """Decompose every question of `table` once (MuSiQue-Full twins share theirs) and write
        `decompositions.jsonl` into `output_dir`: question id -> the generated text, its steps (`#k` references),
        and whether it is invalid (a step referring to itself, a later step or none), with the reasons. Returns
        the texts and the parsed decompositions, by question id."""
        first_rows: dict[str, int] = {}
        for row, question_id in enumerate(table["id"]):
            first_rows.setdefault(question_id, row)
        questions = table.select(sorted(first_rows.values()))
        texts = self.generate(questions)
        parsed = {question_id: parse_decomposition(text) for question_id, text in zip(questions["id"], texts)}
        write_jsonl(
            Path(output_dir) / DECOMPOSITIONS_FILE,
            [
                {
                    "id": question_id,
                    "question": question,
                    "predicted_text": text,
                    "steps": parsed[question_id].steps,
                    "invalid": parsed[question_id].invalid,
                    "problems": parsed[question_id].problems,
                }
                for question_id, question, text in zip(questions["id"], questions["question"], texts)
            ],
        )
        return dict(zip(questions["id"], texts)), parsed

    def predict(self, table: datasets.Dataset, output_dir: Path) -> None:
        """Decompose `table` and score the decompositions against its gold ones (when it has them)."""
        texts, parsed = self.decompose(table, output_dir)
        self.extra_metrics = {}
        gold = dict(zip(table["id"], table["decomposition"]))
        if any(gold[key] for key in texts):
            self.extra_metrics = decomposer_metrics(
                self.fitted, list(texts.values()), [[step["question"] for step in gold[key]] for key in texts]
            )
        self.extra_metrics["invalid_decompositions"] = sum(item.invalid for item in parsed.values())
        log.info("decomposer on %d questions: %s", len(texts), self.extra_metrics)
        return None


class Decomposer:
    """`model=decomposer`: fit the decomposer, then decompose and score the evaluation split (see the module
    docstring). `decomposer` holds the stage settings; `decomposer_checkpoint` reuses a trained one."""

    def __init__(
        self,
        decomposer: DictConfig,
        decomposer_checkpoint: str | None = None,
        eval_batch_size: int = 16,
        num_workers: int = 0,
        name: str = "decomposer",
    ) -> None:
        self.name = name
        self.decomposer_cfg = decomposer
        self.decomposer_checkpoint = decomposer_checkpoint
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers

    def _settings(self) -> dict[str, Any]:
        cfg = self.decomposer_cfg
        return {"max_source_tokens": cfg.max_source_tokens, "max_target_tokens": cfg.max_target_tokens}

    def _reused(self, checkpoint: str, cfg: DictConfig) -> DecomposerPredictor:
        if not Path(checkpoint).is_file():
            raise MusiqueModelsError(f"decomposer checkpoint {checkpoint}: no such file")
        module = QuestionDecomposer.load_from_checkpoint(checkpoint, map_location="cpu")
        fitted = FittedDecomposer(module, load_decomposer_tokenizer(module.hparams.backbone), self._settings())
        return DecomposerPredictor(fitted, cfg, self.eval_batch_size)

    def fit(self, context: RunContext) -> DecomposerPredictor:
        """The decomposer trained as stage `decomposer` on `context`'s training questions (validated on its
        evaluation questions), or the one `decomposer_checkpoint` names; placed for prediction."""
        require_decompositions(context, self.name)
        if self.decomposer_checkpoint:
            return self._reused(self.decomposer_checkpoint, context.cfg)
        cfg = self.decomposer_cfg
        settings = self._settings()
        backbone: BackboneSpec = instantiate(cfg.backbone)
        tokenizer = load_decomposer_tokenizer(backbone)
        module = QuestionDecomposer(
            backbone,
            len(tokenizer),
            tokenizer.pad_token_id,
            lr=cfg.lr,
            warmup_ratio=cfg.warmup_ratio,
            schedule=cfg.schedule,
            label_smoothing=cfg.label_smoothing,
            num_beams=cfg.num_beams,
            max_target_tokens=cfg.max_target_tokens,
        )
        inputs = StageInputs(tokenizer, featurize_decomposer, settings, context.train, context.evaluation)
        best = fit_stage(
            context, "decomposer", module, cfg, inputs, DECOMPOSER_MONITOR, self.eval_batch_size, self.num_workers
        )
        return DecomposerPredictor(FittedDecomposer(best, tokenizer, settings), context.cfg, self.eval_batch_size)

    def load(self, cfg: DictConfig, run_dir: Path) -> DecomposerPredictor:
        """The best decomposer of the finished run in `run_dir` (or the reused `decomposer_checkpoint`); never
        trains."""
        return self._reused(self.decomposer_checkpoint or finished_checkpoint(run_dir, "decomposer"), cfg)

    @classmethod
    def plan(cls, cfg: DictConfig, splits: PlanSplits) -> list[StagePlan]:
        """The stages of a run (alone or as Step Execution's first stage): trained on every training row, validated
        on the dev rows, then decomposing each dev question once; a reused decomposer (`decomposer_checkpoint`)
        only decomposes."""
        if not splits.decompositions:
            raise PlanError(f"model={cfg.model.name} needs decompositions, and {splits.dataset} has none")
        stage = cfg.model.decomposer
        source, target = int(stage.max_source_tokens) + 2, int(stage.max_target_tokens)
        if cfg.model.get("decomposer_checkpoint"):
            generate = seq2seq_component(stage, PREDICT, int(cfg.model.eval_batch_size), source, target)
            return [
                predict_work("decomposer", "decompose the dev questions", generate, splits.dev_questions, "questions")
            ]
        return seq2seq_stages(
            cfg,
            "decomposer",
            stage,
            splits,
            source=source,
            target=target,
            generated=target,
            predict_examples=splits.dev_questions,
            predict_unit="question ids",  # one decomposition per question id
        )


def decomposer_metrics(fitted: FittedDecomposer, predicted: list[str], gold: list[list[str]]) -> dict[str, float]:
    """BLEU (over token ids, as in validation) and exact match of the predicted decomposition texts against the
    gold decompositions (step lists), row by row."""
    tokenizer = fitted.tokenizer
    excluded = {tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id}
    excluded |= {tokenizer.bos_token_id, tokenizer.eos_token_id} - {None}
    predicted_ids = [tokenizer(text)["input_ids"] for text in predicted]
    gold_ids = [tokenizer(decomposition_text(steps))["input_ids"] for steps in gold]
    scores = decomposition_scores(predicted_ids, gold_ids, excluded)
    return {"decomposition_bleu": scores["bleu"], "decomposition_exact_match": scores["exact_match"]}
