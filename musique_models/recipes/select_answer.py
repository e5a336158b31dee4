"""Select+Answer (Trivedi et al., 2022): a paragraph selector ranks every paragraph, then an answerer reads the top K.

`model=select_answer` runs both stages in one command: fit the selector, rank the training and evaluation
splits with it, fit the answerer on the selector's own top-K over the training set, predict the evaluation
split. Each stage keeps its checkpoints and metrics in its own folder of the run; a trained selector can be
reused with `model.selector_checkpoint=PATH`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import datasets
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from musique_models.errors import check_choice
from musique_models.evaluation.predictions import Prediction
from musique_models.features.answerer import featurize_answerer
from musique_models.features.context import ContextBuilder
from musique_models.features.end2end import featurize_end2end
from musique_models.features.selector import featurize_selector
from musique_models.io import write_json
from musique_models.models.answerer import MultiParagraphAnswerer
from musique_models.models.backbone import BackboneSpec, load_tokenizer
from musique_models.models.end2end import End2EndReader
from musique_models.models.selector import ParagraphSelector, RankingMetric, load_selector, rank_paragraphs
from musique_models.recipes.base import RunContext
from musique_models.recipes.reader import (
    YES_NO_MODES,
    FittedReader,
    fit_reader,
    predict_reader,
    reader_kwargs,
    single_input_settings,
    yes_no_setup,
)
from musique_models.training.datamodule import QADataModule, featurize
from musique_models.training.loaders import BalancedNegatives
from musique_models.training.stage import predict, run_stage

log = logging.getLogger(__name__)

# The selector's best checkpoint and early stopping follow its rank F1, as the official `+rank_f1`.
SELECTOR_MONITOR = "val/rank_f1"
ANSWERER_INPUTS = ("auto", "single", "windows")


@dataclass
class FittedSelectAnswer:
    """A trained selector (with its tokenizer and featuriser settings) and the answerer that reads its top K."""

    selector: ParagraphSelector
    selector_tokenizer: Any
    selector_settings: dict[str, Any]
    top_k: int
    answerer: FittedReader


class SelectAnswer:
    """The two-stage recipe; see the module docstring. `selector` and `answerer` hold each stage's settings.

    The answerer reads its top K as ONE input (`featurize_end2end`: up to `max_document_tokens`, each paragraph
    clipped to `max_paragraph_tokens`, global attention on the question and the markers; the official answerer)
    when `answerer.input` is `single`, or `auto` and its backbone reads more than 512 positions (a Longformer);
    through overlapping windows of `max_length` tokens (`featurize_answerer`) otherwise. `yes_no`: `prefix`
    (official) or `head`, see `yes_no_setup`.
    """

    def __init__(
        self,
        selector: DictConfig,
        answerer: DictConfig,
        top_k: int,
        yes_no: str = "prefix",
        selector_checkpoint: str | None = None,
        eval_batch_size: int = 32,
        num_workers: int = 0,
        name: str = "select_answer",
    ) -> None:
        self.name = name
        self.selector_cfg = selector
        self.answerer_cfg = answerer
        self.top_k = top_k
        self.yes_no = yes_no
        check_choice("model.yes_no", yes_no, YES_NO_MODES)
        check_choice("model.answerer.input", answerer.get("input", "auto"), ANSWERER_INPUTS)
        self.selector_checkpoint = selector_checkpoint
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers

    def _datamodule(
        self,
        stage_cfg: DictConfig,
        tokenizer: Any,
        seed: int,
        train: datasets.Dataset | None,
        evaluation: datasets.Dataset | None,
        predict_on: datasets.Dataset | None = None,
        train_subset: BalancedNegatives | None = None,
    ) -> QADataModule:
        return QADataModule.for_tokenizer(
            tokenizer,
            train,
            evaluation,
            predict_on,
            batch_size=stage_cfg.micro_batch_size,
            eval_batch_size=self.eval_batch_size,
            num_workers=self.num_workers,
            seed=seed,
            train_subset=train_subset,
        )

    def run(self, context: RunContext) -> list[Prediction]:
        fitted, answerer_data, eval_table = self.fit(context)
        return predict_reader(
            fitted.answerer.reader, answerer_data, context, fitted.answerer.context_builder(eval_table)
        )

    def fit(
        self, context: RunContext, stage_prefix: str = ""
    ) -> tuple[FittedSelectAnswer, QADataModule, datasets.Dataset]:
        """Fit both stages (named `<stage_prefix>selector` and `<stage_prefix>answerer`) on `context`'s splits.

        Returns the best selector and answerer with what featurises for them, the answerer's datamodule (its
        evaluation rows: the evaluation split's top K by the selector) and the evaluation split with its
        `selected_idxs`."""
        cfg, run_dir = context.cfg, context.run_dir
        # a reused selector brings its own backbone (its tokenizer must featurise the pairs it scores)
        reused = load_selector(self.selector_checkpoint) if self.selector_checkpoint else None
        selector_backbone: BackboneSpec = reused.hparams.backbone if reused else instantiate(self.selector_cfg.backbone)
        answerer_backbone: BackboneSpec = instantiate(self.answerer_cfg.backbone)
        tokenizer = load_tokenizer(selector_backbone)
        cache = f"{cfg.paths.cache_dir}/features"
        include_title = bool(cfg.dataset.get("include_title", False))
        # the text's tokens; the special tokens come on top, within the backbone's positions
        room = selector_backbone.max_length - tokenizer.num_special_tokens_to_add(pair=False)
        selector_settings = {"max_length": min(self.selector_cfg.max_length, room)}
        selector_stage = f"{stage_prefix}selector"

        # Stage 1: the selector, trained on balanced pairs (each question's gold paragraphs and as many negatives,
        # drawn afresh every epoch; a batch is `micro_batch_size` questions), validated on every paragraph.
        train_pairs = featurize(
            context.train, featurize_selector, tokenizer, cache, f"{selector_stage}-train", **selector_settings
        )
        eval_pairs = featurize(
            context.evaluation, featurize_selector, tokenizer, cache, f"{selector_stage}-eval", **selector_settings
        )
        if reused is not None:
            selector = reused
        else:
            selector = ParagraphSelector(
                selector_backbone,
                len(tokenizer),
                top_k=self.top_k,
                lr=self.selector_cfg.lr,
                warmup_ratio=self.selector_cfg.warmup_ratio,
                schedule=self.selector_cfg.get("schedule", "linear"),
                rows_per_forward=self.selector_cfg.get("rows_per_forward"),
            )
            balanced = BalancedNegatives(train_pairs["label"], train_pairs["example_row"], cfg.seed)
            selector_data = self._datamodule(
                self.selector_cfg, tokenizer, cfg.seed, train_pairs, eval_pairs, train_subset=balanced
            )
            result = run_stage(
                selector_stage,
                selector,
                selector_data,
                cfg,
                self.selector_cfg,
                run_dir,
                monitor=SELECTOR_MONITOR,
                shared_loggers=context.loggers,
            )
            selector = ParagraphSelector.load_from_checkpoint(result.best_checkpoint, map_location="cpu")

        # Rank every paragraph of both splits with the best selector (its test: recall@K on the evaluation split).
        selected = {}
        for split, pairs, table in (("train", train_pairs, context.train), ("eval", eval_pairs, context.evaluation)):
            outputs = predict(
                selector, self._datamodule(self.selector_cfg, tokenizer, cfg.seed, None, None, pairs), cfg
            )
            columns = {key: torch.cat([o[key] for o in outputs]) for key in outputs[0]}
            rankings = rank_paragraphs(
                columns["example_row"].tolist(), columns["paragraph_idx"].tolist(), columns["score"].tolist()
            )
            selected[split] = [rankings[row][: self.top_k] for row in range(len(table))]
            ranking_metric = RankingMetric(ks=sorted({2, 3, 5, 7, self.top_k}))
            ranking_metric.update(columns["example_row"], columns["paragraph_idx"], columns["score"], columns["label"])
            metrics = {name: float(value) for name, value in ranking_metric.compute().items()}
            write_json(
                run_dir / selector_stage / f"ranking_{split}.json",
                {"top_k": self.top_k, "metrics": metrics, "rankings": [rankings[row] for row in range(len(table))]},
            )
            if split == "eval":
                for logger in context.loggers:
                    logger.log_metrics({f"{selector_stage}/test/{name}": value for name, value in metrics.items()})
                log.info("%s on the evaluation split: %s", selector_stage, metrics)

        # Stage 2: the answerer, on the selector's own top-K.
        selector_tokenizer = tokenizer
        if answerer_backbone != selector_backbone:
            tokenizer = load_tokenizer(answerer_backbone)
        train_table = context.train.add_column("selected_idxs", selected["train"])
        eval_table = context.evaluation.add_column("selected_idxs", selected["eval"])
        prefix, answer_type_head = yes_no_setup(cfg, self.yes_no)
        heads = {
            "answerability_head": context.has_unanswerable,
            "answer_type_head": answer_type_head,
            **reader_kwargs(self.answerer_cfg),
        }
        answerer: MultiParagraphAnswerer
        if self._single_input(answerer_backbone):
            featurizer: Any = featurize_end2end
            answerer_settings = single_input_settings(self.answerer_cfg, answerer_backbone, include_title, prefix)
            answerer = End2EndReader(
                answerer_backbone,
                len(tokenizer),
                gradient_checkpointing=self.answerer_cfg.gradient_checkpointing,
                **heads,
            )
        else:
            featurizer = featurize_answerer
            answerer_settings = {
                "max_length": min(self.answerer_cfg.max_length, answerer_backbone.max_length),
                "stride": self.answerer_cfg.stride,
                "include_title": include_title,
                "prefix": prefix,
            }
            answerer = MultiParagraphAnswerer(answerer_backbone, len(tokenizer), **heads)
        answerer_stage = f"{stage_prefix}answerer"
        train_rows = featurize(
            train_table, featurizer, tokenizer, cache, f"{answerer_stage}-train", **answerer_settings
        )
        eval_rows = featurize(eval_table, featurizer, tokenizer, cache, f"{answerer_stage}-eval", **answerer_settings)
        answerer_data = self._datamodule(self.answerer_cfg, tokenizer, cfg.seed, train_rows, eval_rows)
        best = fit_reader(
            answerer_stage,
            answerer,
            answerer_data,
            context,
            self.answerer_cfg,
            ContextBuilder(eval_table, include_title, prefix),
        )
        fitted = FittedSelectAnswer(
            selector=selector,
            selector_tokenizer=selector_tokenizer,
            selector_settings=selector_settings,
            top_k=self.top_k,
            answerer=FittedReader(best, tokenizer, featurizer, answerer_settings, include_title, prefix),
        )
        return fitted, answerer_data, eval_table

    def _single_input(self, backbone: BackboneSpec) -> bool:
        """Whether the answerer reads its top K as one input (see the class docstring)."""
        mode = self.answerer_cfg.get("input", "auto")
        return mode == "single" or (mode == "auto" and backbone.max_length > 512)
