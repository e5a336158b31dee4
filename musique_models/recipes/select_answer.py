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
from typing import Any, Protocol

import datasets
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from musique_models.errors import check_choice
from musique_models.evaluation.predictions import Prediction
from musique_models.features.answerer import featurize_answerer
from musique_models.features.context import ContextBuilder
from musique_models.features.end2end import GLOBAL_ATTENTION, featurize_end2end
from musique_models.features.selector import SELECTOR_POSITIVES, featurize_selector
from musique_models.io import write_json
from musique_models.models.answerer import MultiParagraphAnswerer
from musique_models.models.backbone import BackboneSpec, load_tokenizer
from musique_models.models.decoding import DecodedQuestion
from musique_models.models.end2end import End2EndReader
from musique_models.models.selector import ParagraphSelector, RankingMetric, load_selector, rank_paragraphs
from musique_models.recipes.base import RunContext, decoded_predictions
from musique_models.recipes.fitting import StageInputs, features_cache, fit_stage
from musique_models.recipes.planning import PlanSplits, StagePlan, reader_stages, selector_stages
from musique_models.recipes.reader import (
    YES_NO_MODES,
    FittedAnswerer,
    FittedReader,
    reader_kwargs,
    reader_monitor,
    single_input_settings,
    yes_no_setup,
)
from musique_models.recipes.select_answer_settings import AnswererSettings
from musique_models.run_files import RANKING_FILE, stage_ranking_file
from musique_models.settings import dataset_setting
from musique_models.training.datamodule import featurize
from musique_models.training.inference import BatchPredictor
from musique_models.training.loaders import BalancedNegatives
from musique_models.training.stage import finished_checkpoint

log = logging.getLogger(__name__)

# The selector's best checkpoint and early stopping follow its rank F1, as the official `+rank_f1`.
SELECTOR_MONITOR = "val/rank_f1"
ANSWERER_INPUTS = ("auto", "single", "windows")
SUPPORT_SOURCES = ("answerer", "read")


@dataclass
class FittedSelector:
    """A trained selector with the tokenizer and featuriser settings that feed it."""

    selector: ParagraphSelector
    tokenizer: Any
    settings: dict[str, Any]

    @property
    def backbone(self) -> BackboneSpec:
        """The selector's encoder (the answerer shares its tokenizer when it has the same one)."""
        return self.selector.hparams.backbone

    def pairs(self, table: datasets.Dataset, cache_dir: str | None = None, name: str = "rank") -> datasets.Dataset:
        """Every (row, paragraph) pair of `table`, featurised for the selector (cached as `name` under `cache_dir`;
        None: in memory)."""
        return featurize(table, featurize_selector, self.tokenizer, cache_dir, name, **self.settings)

    def ranker(self, cfg: DictConfig, batch_size: int) -> SelectorRanker:
        """The selector placed once for ranking under the run's config `cfg`."""
        return SelectorRanker(self, cfg, batch_size)


class Ranker(Protocol):
    """What Select+Answer ranks paragraphs with: the paper's selector (`SelectorRanker`) or a chain retriever
    (`recipes/beam.py`: `BeamRanker`)."""

    def rank(
        self, table: datasets.Dataset, cache_dir: str | None = None, name: str = "rank"
    ) -> tuple[list[list[int]], Any]:
        """Each row's paragraph idx, best first, and what `record` needs besides."""
        ...

    def record(self, table: datasets.Dataset, rankings: list[list[int]], details: Any, top_k: int | None) -> dict:
        """The content of a ranking file (`selector_ranking.json`) for `rank`'s output over `table`."""
        ...


class FittedRanker(Protocol):
    """A first stage of Select+Answer, trained or not: its encoder (`backbone`; None for a component without one,
    as a lexical ranker), its tokenizer (None likewise), and its placed ranker."""

    @property
    def backbone(self) -> BackboneSpec | None:
        """The stage's encoder; None for a component without one."""
        ...

    @property
    def tokenizer(self) -> Any:
        """The tokenizer of `backbone`; None without one."""
        ...

    def ranker(self, cfg: DictConfig, batch_size: int) -> Ranker:
        """The stage placed once for ranking under the run's config `cfg`."""
        ...


@dataclass
class FittedSelectAnswer:
    """A trained selector and the answerer that reads its top K (None: all the paragraphs it ranks, a chain)."""

    selector: FittedRanker
    top_k: int | None
    answerer: FittedAnswerer


class SelectorRanker:
    """A trained selector placed once: ranks every paragraph of each row of a table."""

    def __init__(self, fitted: FittedSelector, cfg: DictConfig, batch_size: int) -> None:
        self.fitted = fitted
        self.batches = BatchPredictor(fitted.selector, fitted.tokenizer, cfg, batch_size)

    def rank(
        self, table: datasets.Dataset, cache_dir: str | None = None, name: str = "rank"
    ) -> tuple[list[list[int]], dict[str, torch.Tensor]]:
        """Each row's paragraph idx, best first (all of them), and the scored pairs (with their labels)."""
        columns = pair_scores(self.batches, self.fitted.pairs(table, cache_dir, name))
        rankings = rank_paragraphs(
            columns["example_row"].tolist(), columns["paragraph_idx"].tolist(), columns["score"].tolist()
        )
        return [rankings.get(row, []) for row in range(len(table))], columns

    def record(
        self, table: datasets.Dataset, rankings: list[list[int]], details: dict[str, torch.Tensor], top_k: int | None
    ) -> dict[str, Any]:
        """A ranking file's content (`ranking_record`)."""
        return ranking_record(table, rankings, details, top_k)


def pair_scores(selector: BatchPredictor, pairs: datasets.Dataset) -> dict[str, torch.Tensor]:
    """The selector's output columns (example_row, paragraph_idx, score, label) over featurised pairs."""
    outputs = selector.outputs(pairs)
    return {key: torch.cat([output[key] for output in outputs]) for key in outputs[0]}


def ranking_metrics(columns: dict[str, torch.Tensor], top_k: int | None) -> dict[str, float]:
    """recall@K (K = 2, 3, 5, 7 and `top_k`) and rank F1 of the selector's scores against the pairs' labels."""
    metric = RankingMetric(ks=sorted({2, 3, 5, 7, *([top_k] if top_k else [])}))
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
        self.ranker = fitted.selector.ranker(cfg, batch_size)
        self.reader = fitted.answerer.predictor(cfg, batch_size)
        self.extra_metrics: dict[str, float | int] = {}

    def select(self, table: datasets.Dataset) -> tuple[list[list[int]], Any]:
        """Each row's paragraph idx, best first, and the ranker's details (the scored pairs; the chains' scores)."""
        return self.ranker.rank(table)

    def answer(self, table: datasets.Dataset) -> list[DecodedQuestion]:
        """Every row of `table` decoded from its top K (Step Execution's single-hop executor calls this per hop)."""
        rankings, _ = self.select(table)
        return self._read(table, rankings)

    def _read(self, table: datasets.Dataset, rankings: list[list[int]]) -> list[DecodedQuestion]:
        return self.reader.read(with_top_k(table, rankings, self.fitted.top_k))

    def predict(self, table: datasets.Dataset, output_dir: Path) -> list[Prediction]:
        """Rank, read, decode; writes `selector_ranking.json` (every row's ranking; recall@K and rank F1 when the
        table has labels) into `output_dir`."""
        rankings, details = self.select(table)
        record = self.ranker.record(table, rankings, details, self.fitted.top_k)
        if "metrics" in record:
            log.info("selector on %d questions: %s", len(table), record["metrics"])
        write_json(Path(output_dir) / RANKING_FILE, record)
        decoded = self._read(table, rankings)
        self.extra_metrics = self.reader.finish(output_dir)
        read = [ranking[: self.fitted.top_k] for ranking in rankings] if self.support == "read" else None
        return decoded_predictions(table["id"], decoded, support=read)


def with_top_k(table: datasets.Dataset, rankings: list[list[int]], top_k: int | None) -> datasets.Dataset:
    """`table` with `selected_idxs`: each row's `top_k` best paragraphs (None: all it ranks), best first (what the
    answerer reads)."""
    return table.add_column("selected_idxs", [ranking[:top_k] for ranking in rankings])


def ranking_record(
    table: datasets.Dataset, rankings: list[list[int]], columns: dict[str, torch.Tensor], top_k: int | None
) -> dict[str, Any]:
    """A ranking file's content: K, each row's ranking by question id, and recall@K / rank F1 when the pairs have
    labels."""
    record: dict[str, Any] = {"top_k": top_k, "rankings": ranking_rows(table["id"], rankings)}
    if bool(columns["label"].any()):
        record["metrics"] = ranking_metrics(columns, top_k)
    return record


class SelectAnswer:
    """The two-stage recipe; see the module docstring. `selector` and `answerer` hold each stage's settings.

    The answerer reads its top K as ONE input (`featurize_end2end`: up to `max_document_tokens`, each paragraph
    clipped to `max_paragraph_tokens`, global attention on the question and the markers; the official answerer)
    when `answerer.input` is `single`, or `auto` and its backbone reads more than 512 positions (a Longformer);
    through overlapping windows of `max_length` tokens (`featurize_answerer`) otherwise. `yes_no`: `prefix`
    (official) or `head`, see `yes_no_setup`. `selector_positives`: what the selector learns to rank highest,
    `support` (the gold supporting paragraphs) or `answer` (those containing the answer: 1-Para); `support`: the
    predicted support is the `answerer`'s, or the paragraphs `read`, the top K (1-Para's one; Beam SA's chain).
    """

    def __init__(
        self,
        selector: DictConfig,
        answerer: DictConfig,
        top_k: int | None,
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
        check_choice("model.answerer.input", answerer.get("input", AnswererSettings.input), ANSWERER_INPUTS)
        check_choice(
            "model.answerer.global_attention",
            answerer.get("global_attention", AnswererSettings.global_attention),
            GLOBAL_ATTENTION,
        )
        self.selector_checkpoint = selector_checkpoint
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers

    def _selector_settings(self, backbone: BackboneSpec, tokenizer: Any) -> dict[str, Any]:
        # the text's tokens; the special tokens come on top, within the backbone's positions
        room = backbone.max_length - tokenizer.num_special_tokens_to_add(pair=False)
        settings: dict[str, Any] = {"max_length": min(self.selector_cfg.max_length, room)}
        if self.selector_positives != "support":
            settings["positives"] = self.selector_positives
        return settings

    def _single_input(self, backbone: BackboneSpec) -> bool:
        """Whether the answerer reads its top K as one input (see the class docstring)."""
        mode = self.answerer_cfg.get("input", AnswererSettings.input)  # a run saved before the setting: its default
        return mode == "single" or (mode == "auto" and backbone.max_length > 512)

    def _answerer_class(self, backbone: BackboneSpec) -> type[MultiParagraphAnswerer]:
        return End2EndReader if self._single_input(backbone) else MultiParagraphAnswerer

    def _answerer_setup(self, cfg: DictConfig, backbone: BackboneSpec) -> tuple[Any, dict[str, Any], str]:
        """(featuriser, its settings, context prefix) of the answerer under the run's config `cfg`."""
        include_title = bool(dataset_setting(cfg.dataset, "include_title"))
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

    def _fitted_answerer(self, cfg: DictConfig, answerer: MultiParagraphAnswerer, tokenizer: Any) -> FittedReader:
        featurizer, settings, prefix = self._answerer_setup(cfg, answerer.hparams.backbone)
        return FittedReader(answerer, tokenizer, featurizer, settings, settings["include_title"], prefix)

    def fit(self, context: RunContext, stage_prefix: str = "") -> SelectAnswerPredictor:
        """Fit both stages (named `<stage_prefix>selector` and `<stage_prefix>answerer`) on `context`'s splits;
        the best selector and answerer, placed for prediction."""
        selector_stage, answerer_stage = f"{stage_prefix}selector", f"{stage_prefix}answerer"
        selector = self._fit_selector(context, selector_stage)
        # The answerer trains on the selector's own top K over the training split (and validates on the evaluation
        # split's, when it validates). The selector's recall@K on each ranked split is written beside its stage.
        ranker = selector.ranker(context.cfg, self.eval_batch_size)
        validates = bool(self.answerer_cfg.validate)
        splits = {"train": context.train, **({"eval": context.evaluation} if validates else {})}
        ranked = {split: self._rank(context, ranker, table, selector_stage, split) for split, table in splits.items()}
        answerer = self._fit_answerer(context, answerer_stage, ranked["train"], ranked.get("eval"), selector)
        fitted = FittedSelectAnswer(selector, self.top_k, answerer)
        return SelectAnswerPredictor(fitted, context.cfg, self.eval_batch_size, self.support)

    def _fit_selector(self, context: RunContext, stage: str) -> FittedRanker:
        """Stage 1: the selector (or the reused `selector_checkpoint`), trained on balanced pairs (each question's
        gold paragraphs and as many negatives, drawn afresh every epoch; a batch is `micro_batch_size` questions),
        validated on every paragraph."""
        if self.selector_checkpoint:
            return self._selector_from_checkpoint(self.selector_checkpoint)
        backbone: BackboneSpec = instantiate(self.selector_cfg.backbone)
        tokenizer = load_tokenizer(backbone)
        selector = ParagraphSelector(
            backbone,
            len(tokenizer),
            top_k=self.top_k,
            lr=self.selector_cfg.lr,
            warmup_ratio=self.selector_cfg.warmup_ratio,
            schedule=self.selector_cfg.schedule,
            rows_per_forward=self.selector_cfg.rows_per_forward,
        )
        settings = self._selector_settings(backbone, tokenizer)
        inputs = StageInputs(tokenizer, featurize_selector, settings, context.train, context.evaluation)
        seed = context.cfg.seed
        best = fit_stage(
            context,
            stage,
            selector,
            self.selector_cfg,
            inputs,
            SELECTOR_MONITOR,
            self.eval_batch_size,
            self.num_workers,
            train_subset=lambda pairs: BalancedNegatives(pairs["label"], pairs["example_row"], seed),
        )
        return FittedSelector(best, tokenizer, settings)

    def _load_selector(self, run_dir: Path, stage: str) -> FittedRanker:
        """The first stage `stage` of the finished run in `run_dir`: the reused `selector_checkpoint`, else the
        stage's best checkpoint (`StageNotFinishedError` when it has none). A first stage that trains nothing
        overrides this (and `_fit_selector`) and reads no checkpoint."""
        return self._selector_from_checkpoint(self.selector_checkpoint or finished_checkpoint(run_dir, stage))

    def _selector_from_checkpoint(self, path: str | Path) -> FittedRanker:
        """The trained selector of checkpoint `path` (a run's best, or `selector_checkpoint`)."""
        return self._fitted_selector(load_selector(str(path)))

    def _fitted_selector(self, selector: ParagraphSelector) -> FittedSelector:
        tokenizer = load_tokenizer(selector.hparams.backbone)
        return FittedSelector(selector, tokenizer, self._selector_settings(selector.hparams.backbone, tokenizer))

    def _rank(
        self, context: RunContext, ranker: Ranker, table: datasets.Dataset, stage: str, split: str
    ) -> datasets.Dataset:
        """`table` with each row's top K by the selector; the ranking is written to `<stage>/ranking_<split>.json`."""
        rankings, details = ranker.rank(table, features_cache(context), f"{stage}-{split}")
        write_json(
            context.run_dir / stage / stage_ranking_file(split), ranker.record(table, rankings, details, self.top_k)
        )
        return with_top_k(table, rankings, self.top_k)

    def _fit_answerer(
        self,
        context: RunContext,
        stage: str,
        train: datasets.Dataset,
        evaluation: datasets.Dataset | None,
        selector: FittedRanker,
    ) -> FittedAnswerer:
        """Stage 2: the answerer over the selected paragraphs (`selected_idxs`) of `train`, validated on
        `evaluation`'s when it is given."""
        cfg = context.cfg
        backbone: BackboneSpec = instantiate(self.answerer_cfg.backbone)
        shares_backbone = selector.backbone is not None and backbone == selector.backbone
        tokenizer = selector.tokenizer if shares_backbone else load_tokenizer(backbone)
        featurizer, settings, prefix = self._answerer_setup(cfg, backbone)
        _, answer_type_head = yes_no_setup(cfg, self.yes_no)
        context_of = ContextBuilder(
            evaluation if evaluation is not None else context.evaluation, settings["include_title"], prefix
        )
        heads = {
            "answerability_head": context.has_unanswerable,
            "answer_type_head": answer_type_head,
            "validation": context.validation_gold(context_of),
            **reader_kwargs(self.answerer_cfg),
        }
        if self._single_input(backbone):
            answerer: MultiParagraphAnswerer = End2EndReader(
                backbone, len(tokenizer), gradient_checkpointing=self.answerer_cfg.gradient_checkpointing, **heads
            )
        else:
            answerer = MultiParagraphAnswerer(backbone, len(tokenizer), **heads)
        inputs = StageInputs(tokenizer, featurizer, settings, train, evaluation)
        monitor = reader_monitor(answerer.answerability_head, context.eval_paired)
        best = fit_stage(
            context, stage, answerer, self.answerer_cfg, inputs, monitor, self.eval_batch_size, self.num_workers
        )
        return self._fitted_answerer(cfg, best, tokenizer)

    def load(self, cfg: DictConfig, run_dir: Path, stage_prefix: str = "") -> SelectAnswerPredictor:
        """The best selector and answerer of the finished run in `run_dir` (`cfg`: its config); never trains. A
        run that reused a selector (`selector_checkpoint`) loads that one again."""
        selector = self._load_selector(Path(run_dir), f"{stage_prefix}selector")
        fitted_answerer = self._load_answerer(cfg, finished_checkpoint(run_dir, f"{stage_prefix}answerer"))
        fitted = FittedSelectAnswer(selector, self.top_k, fitted_answerer)
        return SelectAnswerPredictor(fitted, cfg, self.eval_batch_size, self.support)

    def _load_answerer(self, cfg: DictConfig, path: Path) -> FittedAnswerer:
        """The answerer of the best checkpoint `path`, with what feeds it under the run's config `cfg`."""
        answerer_class = self._answerer_class(instantiate(self.answerer_cfg.backbone))
        answerer = answerer_class.load_from_checkpoint(path, map_location="cpu")
        return self._fitted_answerer(cfg, answerer, load_tokenizer(answerer.hparams.backbone))

    @classmethod
    def plan(cls, cfg: DictConfig, splits: PlanSplits) -> list[StagePlan]:
        """The stages of a run (`python -m musique_models.plan`): the selector, its rankings, the answerer on its
        top K (Select+Answer and 1-Para)."""
        return selector_stages(cfg, splits, "", reader_stages(cfg, cfg.model.answerer, splits, "answerer"))
