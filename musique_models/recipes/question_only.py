"""The Q-only artifact baseline (`model=q_only`): a seq2seq model generates the answer from the question alone
(`musique_models.models.question_only`); no paragraph ever reaches it and it predicts no support. On data with
unanswerable questions (MuSiQue-Full) it also predicts answerability from the question alone. How well it scores
shows how much a dataset can be answered without reading any paragraph.

One stage, `answerer`, trained on every training question (validated, when the stage validates, with the
evaluator's metrics on the evaluation split); its best checkpoint then answers any table of schema rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets
from hydra.utils import instantiate
from omegaconf import DictConfig

from musique_models.evaluation.predictions import Prediction
from musique_models.features.question_only import featurize_question_only
from musique_models.models.backbone import BackboneSpec, load_tokenizer
from musique_models.models.decoding import decode_answers
from musique_models.models.question_only import QuestionOnlyAnswerer
from musique_models.recipes.base import Predictor, RunContext
from musique_models.recipes.fitting import StageInputs, fit_stage
from musique_models.recipes.planning import PlanSplits, StagePlan, seq2seq_stages
from musique_models.training.datamodule import featurize
from musique_models.training.inference import BatchPredictor
from musique_models.training.stage import finished_checkpoint

STAGE_NAME = "answerer"
# The best checkpoint follows answer F1 even on MuSiQue-Full: its twins share their question, so a question-only
# model predicts the same answerability for both and the paired `group_answer_sufficiency_f1` (what the other
# readers follow there, `reader_monitor`) is 0 at every epoch; it is still logged.
QUESTION_ONLY_MONITOR = "val/answer_f1"


def question_only_settings(stage_cfg: DictConfig) -> dict[str, Any]:
    """`featurize_question_only` settings of the stage config."""
    return {"max_question_tokens": stage_cfg.max_question_tokens, "max_answer_tokens": stage_cfg.max_answer_tokens}


class QuestionOnlyPredictor:
    """A trained Q-only answerer placed once on its device; `predict` answers any table of schema rows (labelled
    or not) from the questions alone: one prediction per row, in order, support empty, answerable when the
    answerability head says p > 0.5 (always, without the head). It writes no side files."""

    def __init__(
        self, module: QuestionOnlyAnswerer, cfg: DictConfig, batch_size: int, settings: dict[str, Any]
    ) -> None:
        self.module = module
        self.tokenizer = module.tokenizer
        self.settings = settings
        self.predictor = BatchPredictor(module, self.tokenizer, cfg, batch_size)
        self.extra_metrics: dict[str, float | int] = {}

    def predict(self, table: datasets.Dataset, output_dir: Path) -> list[Prediction]:
        """One prediction per row of `table`, in order, from its questions alone (`output_dir` gets nothing)."""
        rows = featurize(table, featurize_question_only, self.tokenizer, None, "q-only-predict", **self.settings)
        answers = [""] * len(table)
        confidences = [0.0] * len(table)
        answerable = [True] * len(table)
        for output in self.predictor.outputs(rows):
            texts = decode_answers(self.tokenizer, output["ids"])
            for row, text, confidence, probability in zip(
                output["example_row"].tolist(),
                texts,
                output["confidence"].tolist(),
                output["answerable_prob"].tolist(),
                strict=True,
            ):
                answers[row], confidences[row] = text, confidence
                answerable[row] = probability > 0.5 if self.module.answerability_head else True
        return [
            Prediction(
                id=question_id,
                predicted_answer=answers[row],
                predicted_support_idxs=[],
                predicted_answerable=answerable[row],
                predicted_answer_confidence=confidences[row],
            )
            for row, question_id in enumerate(table["id"])
        ]


class QuestionOnly:
    """`model=q_only`: fit the Q-only answerer as stage `answerer` (see the module docstring). `answerer` holds
    the stage settings (backbone, optimisation, token caps, generation)."""

    def __init__(self, answerer: DictConfig, eval_batch_size: int = 32, num_workers: int = 0, name: str = "q_only"):
        self.name = name
        self.answerer_cfg = answerer
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers

    def fit(self, context: RunContext) -> Predictor:
        """The answerer trained as stage `answerer` on `context`'s training questions (validated on its evaluation
        split when the stage validates), its best checkpoint placed for prediction."""
        cfg = self.answerer_cfg
        backbone: BackboneSpec = instantiate(cfg.backbone)
        tokenizer = load_tokenizer(backbone)
        settings = question_only_settings(cfg)
        module = QuestionOnlyAnswerer(
            backbone,
            len(tokenizer),
            tokenizer.pad_token_id,
            answerability_head=context.has_unanswerable,
            lr=cfg.lr,
            warmup_ratio=cfg.warmup_ratio,
            schedule=cfg.schedule,
            label_smoothing=cfg.label_smoothing,
            num_beams=cfg.num_beams,
            max_answer_tokens=cfg.max_answer_tokens,
            validation=context.validation_gold(),
        )
        inputs = StageInputs(tokenizer, featurize_question_only, settings, context.train, context.evaluation)
        best = fit_stage(
            context, STAGE_NAME, module, cfg, inputs, QUESTION_ONLY_MONITOR, self.eval_batch_size, self.num_workers
        )
        return QuestionOnlyPredictor(best, context.cfg, self.eval_batch_size, settings)

    def load(self, cfg: DictConfig, run_dir: Path) -> Predictor:
        """The best answerer of the finished run in `run_dir`, placed for prediction (its tokenizer rebuilt from
        the checkpoint's backbone); never trains."""
        module = QuestionOnlyAnswerer.load_from_checkpoint(
            finished_checkpoint(Path(run_dir), STAGE_NAME), map_location="cpu"
        )
        return QuestionOnlyPredictor(module, cfg, self.eval_batch_size, question_only_settings(self.answerer_cfg))

    @classmethod
    def plan(cls, cfg: DictConfig, splits: PlanSplits) -> list[StagePlan]:
        """The stages of a run: a seq2seq answerer reading the question alone, stage `answerer`."""
        stage = cfg.model.answerer
        return seq2seq_stages(
            cfg,
            "answerer",
            stage,
            splits,
            source=int(stage.max_question_tokens) + 2,
            target=int(stage.max_answer_tokens) + 2,
            generated=int(stage.max_answer_tokens) + 1,
            predict_examples=splits.dev,
        )
