"""Select+Answer (Trivedi et al., 2022): a paragraph selector ranks every paragraph, then an answerer reads the top K.

`model=select_answer` runs both stages in one command: fit the selector, rank the training split with it, fit the
answerer on the selector's own top-K over the training set; the trained pair then predicts the evaluation split
(ranking it, then reading each question's top K). Each stage keeps its checkpoints and metrics in its own folder of
the run; a trained selector can be reused with `model.selector_checkpoint=PATH`.

`model=one_para` is the 1-Para baseline with the same code (Min et al., 2019; Chen & Durrett, 2019, as the MuSiQue
paper uses it): the selector learns to rank highest the paragraphs that contain the answer
(`selector_positives: answer`), the answerer reads only the top paragraph (K = 1), and that paragraph is the
predicted support (`support: read`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from musique_models.errors import check_choice
from musique_models.evaluation.predictions import Prediction
from musique_models.features.answerer import featurize_answerer
from musique_models.features.end2end import GLOBAL_ATTENTION, featurize_end2end
from musique_models.features.selector import SELECTOR_POSITIVES, featurize_selector
from musique_models.io import write_json
from musique_models.models.answerer import MultiParagraphAnswerer
from musique_models.models.backbone import BackboneSpec, load_tokenizer
from musique_models.models.decoding import DecodedQuestion
from musique_models.models.end2end import End2EndReader
from musique_models.models.selector import ParagraphSelector, RankingMetric, load_selector, rank_paragraphs
from musique_models.recipes.base import RunContext, decoded_predictions
from musique_models.recipes.reader import (
    YES_NO_MODES,
    FittedReader,
    ReaderPredictor,
    fit_reader,
    reader_kwargs,
    single_input_settings,
    yes_no_setup,
)
from musique_models.training.datamodule import QADataModule, featurize
from musique_models.training.inference import BatchPredictor
from musique_models.training.loaders import BalancedNegatives
from musique_models.training.stage import finished_checkpoint, run_stage

log = logging.getLogger(__name__)

# The selector's best checkpoint and early stopping follow its rank F1, as the official `+rank_f1`.
SELECTOR_MONITOR = "val/rank_f1"
ANSWERER_INPUTS = ("auto", "single", "windows")
SUPPORT_SOURCES = ("answerer", "read")
RANKING_FILE = "selector_ranking.json"


@dataclass
class FittedSelectAnswer:
    """A trained selector (with its tokenizer and featuriser settings) and the answerer that reads its top K."""

    selector: ParagraphSelector
    selector_tokenizer: Any
    selector_settings: dict[str, Any]
    top_k: int
    answerer: FittedReader


def pair_scores(selector: BatchPredictor, pairs: datasets.Dataset) -> dict[str, torch.Tensor]:
    """The selector's output columns (example_row, paragraph_idx, score, label) over featurised pairs."""
    outputs = selector.outputs(pairs)
    return {key: torch.cat([output[key] for output in outputs]) for key in outputs[0]}


def ranking_metrics(columns: dict[str, torch.Tensor], top_k: int) -> dict[str, float]:
    """recall@K (K = 2, 3, 5, 7 and `top_k`) and rank F1 of the selector's scores against the pairs' labels."""
    metric = RankingMetric(ks=sorted({2, 3, 5, 7, top_k}))
    metric.update(columns["example_row"], columns["paragraph_idx"], columns["score"], columns["label"])
    return {name: float(value) for name, value in metric.compute().items()}


def ranking_rows(ids: list[str], rankings: list[list[int]]) -> list[dict[str, Any]]:
    """The rows of a ranking file: each table row's question id and its paragraph idx, best first (MuSiQue-Full's
    twins are two rows with one id, in table order)."""
    return [{"id": question_id, "ranking": ranking} for question_id, ranking in zip(ids, rankings, strict=True)]


class SelectAnswerPredictor:
    """A trained selector and answerer, each placed once. `predict` ranks every paragraph of each row, the answerer
    reads the top K; `support="read"` (1-Para) predicts the paragraph read as the support."""

    def __init__(self, fitted: FittedSelectAnswer, cfg: DictConfig, batch_size: int, support: str = "answerer") -> None:
        check_choice("model.support", support, SUPPORT_SOURCES)
        self.fitted = fitted
        self.support = support
        self.selector = BatchPredictor(fitted.selector, fitted.selector_tokenizer, cfg, batch_size)
        self.reader = ReaderPredictor(fitted.answerer, cfg, batch_size)
        self.extra_metrics: dict[str, float] = {}

    def score_paragraphs(self, table: datasets.Dataset) -> dict[str, torch.Tensor]:
        """The selector's score of every (row, paragraph) pair of `table`, with the pairs' labels."""
        fitted = self.fitted
        pairs = featurize(
            table, featurize_selector, fitted.selector_tokenizer, None, "rank", **fitted.selector_settings
        )
        return pair_scores(self.selector, pairs)

    def select(self, table: datasets.Dataset) -> tuple[list[list[int]], dict[str, torch.Tensor]]:
        """Each row's paragraph idx, best first (all of them), and the scored pairs."""
        columns = self.score_paragraphs(table)
        rankings = rank_paragraphs(
            columns["example_row"].tolist(), columns["paragraph_idx"].tolist(), columns["score"].tolist()
        )
        return [rankings.get(row, []) for row in range(len(table))], columns

    def answer(self, table: datasets.Dataset) -> list[DecodedQuestion]:
        """Every row of `table` decoded from its top K (Step Execution's single-hop executor calls this per hop)."""
        rankings, _ = self.select(table)
        return self._read(table, rankings)

    def _read(self, table: datasets.Dataset, rankings: list[list[int]]) -> list[DecodedQuestion]:
        top_k = self.fitted.top_k
        return self.reader.read(table.add_column("selected_idxs", [ranking[:top_k] for ranking in rankings]))

    def predict(self, table: datasets.Dataset, output_dir: Path) -> list[Prediction]:
        """Rank, read, decode; writes `selector_ranking.json` (every row's ranking; recall@K and rank F1 when the
        table has labels) into `output_dir`."""
        rankings, columns = self.select(table)
        record: dict[str, Any] = {"top_k": self.fitted.top_k, "rankings": ranking_rows(table["id"], rankings)}
        if bool(columns["label"].any()):
            record["metrics"] = ranking_metrics(columns, self.fitted.top_k)
            log.info("selector on %d questions: %s", len(table), record["metrics"])
        write_json(Path(output_dir) / RANKING_FILE, record)
        decoded = self._read(table, rankings)
        read = [ranking[:1] for ranking in rankings] if self.support == "read" else None
        return decoded_predictions(table["id"], decoded, support=read)


class SelectAnswer:
    """The two-stage recipe; see the module docstring. `selector` and `answerer` hold each stage's settings.

    The answerer reads its top K as ONE input (`featurize_end2end`: up to `max_document_tokens`, each paragraph
    clipped to `max_paragraph_tokens`, global attention on the question and the markers; the official answerer)
    when `answerer.input` is `single`, or `auto` and its backbone reads more than 512 positions (a Longformer);
    through overlapping windows of `max_length` tokens (`featurize_answerer`) otherwise. `yes_no`: `prefix`
    (official) or `head`, see `yes_no_setup`. `selector_positives`: what the selector learns to rank highest,
    `support` (the gold supporting paragraphs) or `answer` (those containing the answer: 1-Para); `support`: the
    predicted support is the `answerer`'s, or the paragraph `read` (1-Para, K = 1).
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
        selector_positives: str = "support",
        support: str = "answerer",
        name: str = "select_answer",
    ) -> None:
        check_choice("model.selector_positives", selector_positives, SELECTOR_POSITIVES)
        check_choice("model.support", support, SUPPORT_SOURCES)
        self.name = name
        self.selector_positives = selector_positives
        self.support = support
        self.selector_cfg = selector
        self.answerer_cfg = answerer
        self.top_k = top_k
        self.yes_no = yes_no
        check_choice("model.yes_no", yes_no, YES_NO_MODES)
        check_choice("model.answerer.input", answerer.get("input", "auto"), ANSWERER_INPUTS)
        check_choice(
            "model.answerer.global_attention", answerer.get("global_attention", "before_context"), GLOBAL_ATTENTION
        )
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

    def _selector_settings(self, backbone: BackboneSpec, tokenizer: Any) -> dict[str, Any]:
        # the text's tokens; the special tokens come on top, within the backbone's positions
        room = backbone.max_length - tokenizer.num_special_tokens_to_add(pair=False)
        settings: dict[str, Any] = {"max_length": min(self.selector_cfg.max_length, room)}
        if self.selector_positives != "support":
            settings["positives"] = self.selector_positives
        return settings

    def _answerer_setup(self, cfg: DictConfig, backbone: BackboneSpec) -> tuple[Any, dict[str, Any], str]:
        """(featuriser, its settings, context prefix) of the answerer under the run's config `cfg`."""
        include_title = bool(cfg.dataset.get("include_title", False))
        prefix, _ = yes_no_setup(cfg, self.yes_no)
        if self._single_input(backbone):
            return featurize_end2end, single_input_settings(self.answerer_cfg, backbone, include_title, prefix), prefix
        settings = {
            "max_length": min(self.answerer_cfg.max_length, backbone.max_length),
            "stride": self.answerer_cfg.stride,
            "include_title": include_title,
            "prefix": prefix,
        }
        return featurize_answerer, settings, prefix

    def fit(self, context: RunContext, stage_prefix: str = "") -> SelectAnswerPredictor:
        """Fit both stages (named `<stage_prefix>selector` and `<stage_prefix>answerer`) on `context`'s splits;
        the best selector and answerer, placed for prediction."""
        cfg, run_dir = context.cfg, context.run_dir
        # a reused selector brings its own backbone (its tokenizer must featurise the pairs it scores)
        reused = load_selector(self.selector_checkpoint) if self.selector_checkpoint else None
        selector_backbone: BackboneSpec = reused.hparams.backbone if reused else instantiate(self.selector_cfg.backbone)
        answerer_backbone: BackboneSpec = instantiate(self.answerer_cfg.backbone)
        selector_tokenizer = load_tokenizer(selector_backbone)
        cache = f"{cfg.paths.cache_dir}/features"
        selector_settings = self._selector_settings(selector_backbone, selector_tokenizer)
        selector_stage = f"{stage_prefix}selector"
        answerer_validates = bool(self.answerer_cfg.get("validate", True))

        # Stage 1: the selector, trained on balanced pairs (each question's gold paragraphs and as many negatives,
        # drawn afresh every epoch; a batch is `micro_batch_size` questions), validated on every paragraph.
        def pairs_of(table: datasets.Dataset, split: str) -> datasets.Dataset:
            return featurize(
                table, featurize_selector, selector_tokenizer, cache, f"{selector_stage}-{split}", **selector_settings
            )

        train_pairs = pairs_of(context.train, "train")
        if reused is not None:
            selector = reused
        else:
            selector = ParagraphSelector(
                selector_backbone,
                len(selector_tokenizer),
                top_k=self.top_k,
                lr=self.selector_cfg.lr,
                warmup_ratio=self.selector_cfg.warmup_ratio,
                schedule=self.selector_cfg.get("schedule", "linear"),
                rows_per_forward=self.selector_cfg.get("rows_per_forward"),
            )
            eval_pairs = pairs_of(context.evaluation, "eval") if self.selector_cfg.get("validate", True) else None
            balanced = BalancedNegatives(train_pairs["label"], train_pairs["example_row"], cfg.seed)
            selector_data = self._datamodule(
                self.selector_cfg, selector_tokenizer, cfg.seed, train_pairs, eval_pairs, train_subset=balanced
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

        # Stage 2: the answerer, trained on the selector's own top K over the training split (and validated on the
        # evaluation split's, when it validates). The selector's test is recall@K on the training split here; on
        # the evaluation split it is written when the evaluation split is predicted (`selector_ranking.json`).
        featurizer, answerer_settings, prefix = self._answerer_setup(cfg, answerer_backbone)
        answerer_tokenizer = (
            selector_tokenizer if answerer_backbone == selector_backbone else load_tokenizer(answerer_backbone)
        )
        fitted = FittedSelectAnswer(
            selector=selector,
            selector_tokenizer=selector_tokenizer,
            selector_settings=selector_settings,
            top_k=self.top_k,
            answerer=FittedReader(
                None, answerer_tokenizer, featurizer, answerer_settings, answerer_settings["include_title"], prefix
            ),
        )
        scorer = BatchPredictor(selector, selector_tokenizer, cfg, self.eval_batch_size)
        selected = {}
        for split, table, pairs in (("train", context.train, train_pairs), ("eval", context.evaluation, None)):
            if split == "eval" and not answerer_validates:
                continue
            columns = pair_scores(scorer, pairs if pairs is not None else pairs_of(table, split))
            rankings = rank_paragraphs(
                columns["example_row"].tolist(), columns["paragraph_idx"].tolist(), columns["score"].tolist()
            )
            ranked = [rankings.get(row, []) for row in range(len(table))]
            selected[split] = [ranking[: self.top_k] for ranking in ranked]
            write_json(
                run_dir / selector_stage / f"ranking_{split}.json",
                {
                    "top_k": self.top_k,
                    "metrics": ranking_metrics(columns, self.top_k),
                    "rankings": ranking_rows(table["id"], ranked),
                },
            )
        train_table = context.train.add_column("selected_idxs", selected["train"])
        eval_table = context.evaluation.add_column("selected_idxs", selected["eval"]) if "eval" in selected else None
        _, answer_type_head = yes_no_setup(cfg, self.yes_no)
        heads = {
            "answerability_head": context.has_unanswerable,
            "answer_type_head": answer_type_head,
            **reader_kwargs(self.answerer_cfg),
        }
        answerer: MultiParagraphAnswerer
        if featurizer is featurize_end2end:
            answerer = End2EndReader(
                answerer_backbone,
                len(answerer_tokenizer),
                gradient_checkpointing=self.answerer_cfg.gradient_checkpointing,
                **heads,
            )
        else:
            answerer = MultiParagraphAnswerer(answerer_backbone, len(answerer_tokenizer), **heads)
        answerer_stage = f"{stage_prefix}answerer"

        def rows_of(table: datasets.Dataset, split: str) -> datasets.Dataset:
            return featurize(
                table, featurizer, answerer_tokenizer, cache, f"{answerer_stage}-{split}", **answerer_settings
            )

        answerer_data = self._datamodule(
            self.answerer_cfg,
            answerer_tokenizer,
            cfg.seed,
            rows_of(train_table, "train"),
            rows_of(eval_table, "eval") if eval_table is not None else None,
        )
        context_of = fitted.answerer.context_builder(eval_table if eval_table is not None else context.evaluation)
        best = fit_reader(answerer_stage, answerer, answerer_data, context, self.answerer_cfg, context_of)
        fitted.answerer.reader = best
        return SelectAnswerPredictor(fitted, cfg, self.eval_batch_size, self.support)

    def load(self, cfg: DictConfig, run_dir: Path, stage_prefix: str = "") -> SelectAnswerPredictor:
        """The best selector and answerer of the finished run in `run_dir` (`cfg`: its config); never trains. A
        run that reused a selector (`selector_checkpoint`) loads that one again."""
        selector_checkpoint = self.selector_checkpoint or finished_checkpoint(run_dir, f"{stage_prefix}selector")
        selector = load_selector(selector_checkpoint)
        answerer_path = finished_checkpoint(run_dir, f"{stage_prefix}answerer")
        answerer_backbone: BackboneSpec = instantiate(self.answerer_cfg.backbone)
        reader_class = End2EndReader if self._single_input(answerer_backbone) else MultiParagraphAnswerer
        answerer = reader_class.load_from_checkpoint(answerer_path, map_location="cpu")
        selector_tokenizer = load_tokenizer(selector.hparams.backbone)
        answerer_tokenizer = load_tokenizer(answerer.hparams.backbone)
        featurizer, answerer_settings, prefix = self._answerer_setup(cfg, answerer.hparams.backbone)
        fitted = FittedSelectAnswer(
            selector=selector,
            selector_tokenizer=selector_tokenizer,
            selector_settings=self._selector_settings(selector.hparams.backbone, selector_tokenizer),
            top_k=self.top_k,
            answerer=FittedReader(
                answerer, answerer_tokenizer, featurizer, answerer_settings, answerer_settings["include_title"], prefix
            ),
        )
        return SelectAnswerPredictor(fitted, cfg, self.eval_batch_size, self.support)

    def _single_input(self, backbone: BackboneSpec) -> bool:
        """Whether the answerer reads its top K as one input (see the class docstring)."""
        mode = self.answerer_cfg.get("input", "auto")
        return mode == "single" or (mode == "auto" and backbone.max_length > 512)
