"""Select+Answer with Beam Retrieval as its first stage (`model=beam_select_answer`, "Beam SA").

Stage `selector` is a `BeamRetriever` (models/beam_retriever.py; Zhang et al., NAACL 2024): it retrieves each
question's chain of paragraphs hop by hop with beam search. The chain, in chain order, is what the answerer reads
(`selected_idxs`) and the predicted support. Stage `answerer` is Select+Answer's, trained on the retriever's own
chains over the training split; on MuSiQue-Full its answerability head predicts answerability (the retriever has
none: the authors' code retrieves for MuSiQue-Ans alone). Everything else is Select+Answer's
(`recipes/select_answer.py`): `selector_checkpoint`, the ranking files, the load of a finished run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
from hydra.utils import instantiate
from omegaconf import DictConfig

from musique_models.errors import MusiqueModelsError
from musique_models.features.beam import featurize_beam
from musique_models.features.context import end_token_id, start_token_id
from musique_models.models.backbone import BackboneSpec, load_tokenizer
from musique_models.models.beam_retriever import BeamRetriever, ChainMetric
from musique_models.recipes.base import RunContext
from musique_models.recipes.fitting import StageInputs, fit_stage
from musique_models.recipes.planning import (
    BEAM_RETRIEVER,
    PREDICT,
    TRAIN,
    Component,
    PlanSplits,
    StagePlan,
    ranking_stages,
    reader_stages,
    train_work,
    validation_stages,
)
from musique_models.recipes.select_answer import SelectAnswer, ranking_rows
from musique_models.training.datamodule import featurize
from musique_models.training.inference import BatchPredictor

# The retriever's best checkpoint follows the exact match of its chains on the evaluation split, as the authors'.
RETRIEVER_MONITOR = "val/chain_em"


@dataclass
class FittedBeamRetriever:
    """A trained Beam Retrieval stage with its tokenizer and featuriser settings (`featurize_beam`)."""

    selector: BeamRetriever
    tokenizer: Any
    settings: dict[str, Any]

    @property
    def backbone(self) -> BackboneSpec:
        """The retriever's encoder."""
        return self.selector.hparams.backbone

    def questions(self, table: datasets.Dataset, cache_dir: str | None = None, name: str = "rank") -> datasets.Dataset:
        """`table` featurised for the retriever, one row per question (cached as `name` under `cache_dir`)."""
        return featurize(table, featurize_beam, self.tokenizer, cache_dir, name, **self.settings)

    def ranker(self, cfg: DictConfig, batch_size: int) -> BeamRanker:
        """The retriever placed once for prediction under the run's config `cfg`."""
        return BeamRanker(self, cfg, batch_size)


class BeamRanker:
    """A trained retriever placed once: each row's chain (paragraph idx in chain order), with its hop scores."""

    def __init__(self, fitted: FittedBeamRetriever, cfg: DictConfig, batch_size: int) -> None:
        self.fitted = fitted
        self.batches = BatchPredictor(fitted.selector, fitted.tokenizer, cfg, batch_size)

    def rank(
        self, table: datasets.Dataset, cache_dir: str | None = None, name: str = "rank"
    ) -> tuple[list[list[int]], list[dict[str, Any]]]:
        """Each row's chain, and per row its hop scores and gold chain (idx; [] without one)."""
        by_row: dict[int, dict[str, Any]] = {}
        for output in self.batches.outputs(self.fitted.questions(table, cache_dir, name)):
            for row, chain, scores, gold in zip(
                output["example_row"], output["chain"], output["hop_scores"], output["gold"], strict=True
            ):
                by_row[row] = {"chain": chain, "hop_scores": scores, "gold": gold}
        details = [by_row[row] for row in range(len(table))]
        return [detail["chain"] for detail in details], details

    def record(
        self, table: datasets.Dataset, rankings: list[list[int]], details: list[dict[str, Any]], top_k: int | None
    ) -> dict[str, Any]:
        """A ranking file's content: each row's chain (as `rankings`, and with its hop scores under `chains`), and
        the chains' support F1, exact match and recall against the gold chains where the rows have them."""
        record: dict[str, Any] = {
            "top_k": top_k,
            "rankings": ranking_rows(table["id"], rankings),
            "chains": [
                {
                    "row": row,
                    "id": question_id,
                    "chain": detail["chain"],
                    # a question with no more paragraphs than hops takes them all, unscored (NaN: null in JSON)
                    "hop_scores": [None if math.isnan(score) else round(score, 6) for score in detail["hop_scores"]],
                }
                for row, (question_id, detail) in enumerate(zip(table["id"], details, strict=True))
            ],
        }
        metric = ChainMetric()
        for row, detail in enumerate(details):
            if detail["gold"]:
                metric.update(row, detail["chain"], detail["gold"])
        if any(detail["gold"] for detail in details):
            record["metrics"] = {name: round(float(value), 6) for name, value in metric.compute().items()}
        return record


def load_beam_retriever(checkpoint: str | Path) -> BeamRetriever:
    """A trained retriever from a checkpoint file; another stage's checkpoint is refused with what it holds."""
    if not Path(checkpoint).is_file():
        raise MusiqueModelsError(f"beam retriever checkpoint {checkpoint}: no such file")
    try:
        return BeamRetriever.load_from_checkpoint(str(checkpoint), map_location="cpu")
    except (TypeError, RuntimeError, KeyError) as error:
        raise MusiqueModelsError(
            f"{checkpoint} is not a beam retriever's checkpoint (a Beam SA run's is "
            "<run>/selector/checkpoints/best.ckpt): pass one as model.selector_checkpoint"
        ) from error


class BeamSelectAnswer(SelectAnswer):
    """See the module docstring. `selector` holds the retriever's settings (`stage_settings/beam_retriever`);
    `top_k` is None: the answerer reads the whole chain, which is the predicted support (`support: read`)."""

    def __init__(self, selector: DictConfig, answerer: DictConfig, top_k: int | None = None, **kwargs: Any) -> None:
        if top_k is not None:
            raise MusiqueModelsError(
                f"model.top_k={top_k}: Beam SA's answerer reads the whole retrieved chain (model.top_k=null); "
                "the chain's length is the question's hop count"
            )
        if int(selector.beam_size) < 1:
            raise MusiqueModelsError(f"model.selector.beam_size={selector.beam_size}: a beam keeps at least 1 chain")
        super().__init__(selector, answerer, top_k, **kwargs)

    def _retriever_settings(self, backbone: BackboneSpec) -> dict[str, Any]:
        return {
            "max_length": min(self.selector_cfg.max_length, backbone.max_length),
            "label_order": bool(self.selector_cfg.label_order),
        }

    def _fit_selector(self, context: RunContext, stage: str) -> FittedBeamRetriever:
        """Stage 1: the retriever (or the reused `selector_checkpoint`), trained on the answerable training
        questions (an unanswerable one has no complete chain), `micro_batch_size` questions per batch, validated
        on the support F1 of its chains."""
        if self.selector_checkpoint:
            return self._selector_from_checkpoint(self.selector_checkpoint)
        settings_cfg = self.selector_cfg
        backbone: BackboneSpec = instantiate(settings_cfg.backbone)
        tokenizer = load_tokenizer(backbone)
        settings = self._retriever_settings(backbone)
        retriever = BeamRetriever(
            backbone,
            len(tokenizer),
            cls_token_id=start_token_id(tokenizer),
            sep_token_id=end_token_id(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            beam_size=settings_cfg.beam_size,
            max_length=settings["max_length"],
            label_order=settings["label_order"],
            rows_per_forward=settings_cfg.rows_per_forward,
            gradient_checkpointing=settings_cfg.gradient_checkpointing,
            seed=int(context.cfg.seed),
            lr=settings_cfg.lr,
            warmup_ratio=settings_cfg.warmup_ratio,
            schedule=settings_cfg.schedule,
        )
        train = context.train.filter(lambda answerable: answerable, input_columns="answerable")
        inputs = StageInputs(tokenizer, featurize_beam, settings, train, context.evaluation)
        best = fit_stage(
            context, stage, retriever, settings_cfg, inputs, RETRIEVER_MONITOR, self.eval_batch_size, self.num_workers
        )
        return FittedBeamRetriever(best, tokenizer, settings)

    def _selector_from_checkpoint(self, path: str | Path) -> FittedBeamRetriever:
        retriever = load_beam_retriever(path)
        settings = {"max_length": retriever.hparams.max_length, "label_order": retriever.hparams.label_order}
        return FittedBeamRetriever(retriever, load_tokenizer(retriever.hparams.backbone), settings)

    @classmethod
    def plan(cls, cfg: DictConfig, splits: PlanSplits) -> list[StagePlan]:
        """The stages of a run: Beam Retrieval (trained on the answerable rows), its chains, Select+Answer's
        answerer reading each chain."""
        model = cfg.model
        retriever = model.selector
        eval_batch = int(model.eval_batch_size)
        # the mean hops rounded up: a question's retrieval work grows with its hops, so the count stays an upper bound
        hops = math.ceil(splits.support)
        shape = {
            "backbone": retriever.backbone.name,
            "kind": BEAM_RETRIEVER,
            "tokens": min(int(retriever.max_length), int(retriever.backbone.max_length)),
            "paragraphs": splits.paragraphs,
            "beams": int(retriever.beam_size),
            "hops": hops,
        }
        train = Component(
            mode=TRAIN,
            batch=int(retriever.micro_batch_size),
            gradient_checkpointing=bool(retriever.gradient_checkpointing),
            **shape,
        )
        predict = Component(mode=PREDICT, batch=eval_batch, **shape)
        stages = []
        if not model.get("selector_checkpoint"):
            # the answerable rows only: an unanswerable twin has no complete chain to learn
            answerable = splits.train // splits.twins
            stages.append(train_work("selector", train, answerable, "answerable rows", retriever))
            stages += validation_stages("selector", predict, splits, retriever, eval_batch)
        stages += ranking_stages("selector", predict, splits, model.answerer, eval_batch, rows_are_pairs=False)
        # the answerer reads the chain: a question's hops (rounded up)
        paragraphs_read = (math.ceil(splits.support), math.ceil(splits.support_dev))
        return stages + reader_stages(cfg, model.answerer, splits, "answerer", paragraphs_read)
