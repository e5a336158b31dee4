"""What a recipe's `plan` builds on: the vocabulary of a run's cost (a `Component`, the `StagePlan` of a piece of
work, the `PlanSplits` a job reads) and the stages the recipes share (a selector and its rankings, a single-input
reader, a seq2seq stage). Each recipe counts its own stages (`plan(cfg, splits)`, a class method; a recipe without
one cannot be planned); `musique_models.plan` composes the jobs, reads the datasets' official counts and calls it.

The counts come from the composed config (batches, epochs, gradient accumulation, epochs of a fixed length, K,
token caps, validation, evaluation batches) and from the dataset config's `official` counts. Two choices make every
count an upper bound: each input is taken at its token cap (shorter inputs cost less) and every epoch validates
(early stopping can end a stage sooner). Light: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from musique_models.errors import MusiqueModelsError

TRAIN, PREDICT = "train", "predict"
# The kinds of component a stage runs (gpu_check.py builds each from its backbone's published configuration):
SELECTOR = "selector"  # ParagraphSelector: one `question SEP paragraph` text a row
READER = "reader"  # End2EndReader: a Longformer reading the question and its paragraphs as ONE input a row
SEQ2SEQ = "seq2seq"  # an encoder-decoder: trained with teacher forcing, predicting by generation
BEAM_RETRIEVER = "beam_retriever"  # BeamRetriever: a row is a question, searched hop by hop
KINDS = (SELECTOR, READER, SEQ2SEQ, BEAM_RETRIEVER)
# Tokens of a reader's input beside the question and the paragraphs' caps: the separators, the `( yes | no )`
# prefix, the end token (about; a Longformer input is padded to its attention window anyway).
READER_EXTRA_TOKENS = 8
# A question's tokens in a synthetic Beam Retrieval input (gpu_check.py); paragraphs fill the rest of each hop.
BEAM_QUESTION_TOKENS = 30


class PlanError(MusiqueModelsError):
    """An experiment the plan cannot count (the shipped samples, a dataset or a model it has no facts of)."""


@dataclass(frozen=True)
class Component:
    """One measured shape: a backbone (`conf/backbone/<name>`) as one kind of module (`KINDS`), training or
    predicting (`mode`), with `batch` rows a step (questions for the beam retriever), `tokens` input tokens a row
    (the beam retriever: a hop input's cap), `paragraphs` a row (a reader's markers; the retriever's candidates),
    `target_tokens` decoder tokens a row (seq2seq; generated tokens when predicting), `beams` (seq2seq: beam
    search; the retriever: its beam size), `hops` (the retriever) and `gradient_checkpointing`."""

    backbone: str
    kind: str
    mode: str
    batch: int
    tokens: int
    paragraphs: int = 0
    target_tokens: int = 0
    beams: int = 1
    hops: int = 0
    gradient_checkpointing: bool = False

    @property
    def key(self) -> str:
        """The name of this shape in a throughput file, e.g. `longformer_large/reader/train/b4x4096p20/ckpt`
        (batch x tokens, paragraphs; `t`: target tokens; `beam`, `hops`; `ckpt`: gradient checkpointing)."""
        parts = [self.backbone, self.kind, self.mode, f"b{self.batch}x{self.tokens}"]
        if self.kind in (READER, BEAM_RETRIEVER):
            parts[-1] += f"p{self.paragraphs}"
        if self.kind == SEQ2SEQ:
            parts.append(f"t{self.target_tokens}")
        if self.kind == BEAM_RETRIEVER or (self.kind == SEQ2SEQ and self.mode == PREDICT):
            parts.append(f"beam{self.beams}")
        if self.kind == BEAM_RETRIEVER:
            parts.append(f"hops{self.hops}")
        if self.gradient_checkpointing:
            parts.append("ckpt")
        return "/".join(parts)

    @property
    def tokens_per_step(self) -> int:
        """The tokens a step reads: rows x tokens (seq2seq: source + target tokens; the retriever: every hop input
        of its questions at its cap)."""
        if self.kind == SEQ2SEQ:
            return self.batch * (self.tokens + self.target_tokens)
        if self.kind == BEAM_RETRIEVER:
            return self.batch * sum(count * length for count, length in beam_hop_inputs(self))
        return self.batch * self.tokens

    def as_dict(self) -> dict[str, Any]:
        """The component's fields and key (JSON)."""
        return {"key": self.key, **{name: getattr(self, name) for name in self.__dataclass_fields__}}


def beam_hop_inputs(component: Component) -> list[tuple[int, int]]:
    """(inputs, tokens each) of every hop of one question of a beam retriever component, its paragraphs filling
    each hop's budget (the authors' `hop_budget`: hop h of H keeps room for H-1-h later paragraphs)."""
    hops, candidates, cap = component.hops, component.paragraphs, component.tokens
    paragraph = (cap - 2 - BEAM_QUESTION_TOKENS) // hops
    found = []
    for hop in range(hops):
        budget = cap - 2 - (hops - 1 - hop) * paragraph
        inputs = candidates if hop == 0 else component.beams * (candidates - hop)
        found.append((inputs, min(budget, BEAM_QUESTION_TOKENS + (hop + 1) * paragraph) + 2))
    return found


@dataclass(frozen=True)
class StagePlan:
    """One piece of work of a job's stage: `component` run over `examples` examples (`unit` says what an example
    is), `batch` of them a step, `repeats` times (epochs; validations), at most `steps_cap` steps a repeat
    (`batches_per_epoch` x accumulation)."""

    stage: str
    work: str
    component: Component
    examples: int
    unit: str
    batch: int
    repeats: int = 1
    accumulate_grad_batches: int = 1
    steps_cap: int | None = None

    @property
    def steps_per_repeat(self) -> int:
        """ceil(examples / batch), capped by `steps_cap`."""
        steps = math.ceil(self.examples / self.batch)
        return steps if self.steps_cap is None else min(steps, self.steps_cap)

    @property
    def steps(self) -> int:
        """Every step of the work: `steps_per_repeat` x `repeats`."""
        return self.steps_per_repeat * self.repeats

    def as_dict(self) -> dict[str, Any]:
        """The work's fields and counts (JSON)."""
        return {
            "stage": self.stage,
            "work": self.work,
            "component": self.component.key,
            "mode": self.component.mode,
            "examples": self.examples,
            "unit": self.unit,
            "batch": self.batch,
            "repeats": self.repeats,
            "accumulate_grad_batches": self.accumulate_grad_batches,
            "steps_cap": self.steps_cap,
            "steps": self.steps,
        }


@dataclass(frozen=True)
class PlanSplits:
    """What a job's stages read: `train` and `dev` rows, what a row is (`unit`), a training row's and a dev row's
    mean supporting paragraphs (`support`, `support_dev`), paragraphs a row, rows a question id (`twins`), the dev
    split's question ids (`dev_questions`), and the dataset's name and whether its questions have decompositions."""

    train: int
    dev: int
    unit: str
    support: float
    support_dev: float
    paragraphs: int
    twins: int = 1
    dev_questions: int = 0
    dataset: str = ""
    decompositions: bool = True


def selector_stages(
    cfg: DictConfig, split: PlanSplits, prefix: str, answerer_stages: list[StagePlan]
) -> list[StagePlan]:
    """The paper selector (stage `<prefix>selector`): trained on balanced pairs, validated on every pair, ranking
    the training split and the dev split (for the answerer's validation and for the final prediction); then
    `answerer_stages`."""
    model = cfg.model
    selector = model.selector
    eval_batch = int(model.eval_batch_size)
    name = f"{prefix}selector"
    tokens = min(int(selector.max_length), int(selector.backbone.max_length) - 2) + 2
    predict = Component(selector.backbone.name, SELECTOR, PREDICT, eval_batch, tokens)
    stages = []
    if not model.get("selector_checkpoint"):
        # a batch is `micro_batch_size` questions, each with its gold paragraphs and as many negatives
        pairs = math.ceil(int(selector.micro_batch_size) * 2 * split.support)
        train = Component(selector.backbone.name, SELECTOR, TRAIN, pairs, tokens)
        stages.append(train_work(name, train, split.train, split.unit, selector, batch=int(selector.micro_batch_size)))
        stages += validation_stages(name, predict, split, selector, eval_batch, rows_are_pairs=True)
    stages += ranking_stages(name, predict, split, model.answerer, eval_batch, rows_are_pairs=True)
    return stages + answerer_stages


def ranking_stages(
    name: str, predict: Component, split: PlanSplits, answerer: DictConfig, eval_batch: int, rows_are_pairs: bool
) -> list[StagePlan]:
    """The first stage ranks the training split (what the answerer trains on) and the dev split: for the
    answerer's validation (when it validates) and for the final prediction."""
    per_row = split.paragraphs if rows_are_pairs else 1
    unit = "pairs" if rows_are_pairs else split.unit  # a pair: a row and one of its paragraphs
    dev_rankings = 2 if answerer.validate else 1
    return [
        predict_work(name, "rank the training split", predict, split.train * per_row, unit, eval_batch),
        predict_work(name, "rank the dev split", predict, split.dev * per_row, unit, eval_batch, repeats=dev_rankings),
    ]


def validation_stages(
    name: str, predict: Component, split: PlanSplits, stage: DictConfig, eval_batch: int, rows_are_pairs: bool = False
) -> list[StagePlan]:
    """One prediction over the dev split every `check_val_every_n_epoch` epochs, when the stage validates (every
    epoch counted: early stopping can end the stage sooner)."""
    if not stage.validate:
        return []
    per_row = split.paragraphs if rows_are_pairs else 1
    unit = "pairs" if rows_are_pairs else split.unit  # a pair: a row and one of its paragraphs
    validations = int(stage.max_epochs) // int(stage.check_val_every_n_epoch)
    return [predict_work(name, "validate", predict, split.dev * per_row, unit, eval_batch, repeats=validations)]


def reader_stages(
    cfg: DictConfig,
    stage: DictConfig,
    split: PlanSplits,
    name: str,
    paragraphs_read: tuple[int, int] | None = None,
) -> list[StagePlan]:
    """A single-input Longformer reader (End2End's reader; Select+Answer's answerer on its top K): train,
    validate, predict the dev split. `paragraphs_read`: (training, dev) paragraphs an input holds (default: the
    model's `top_k`)."""
    backbone = stage.backbone
    mode = stage.get("input", "single")  # End2End's reader has no `input`: always one input
    if mode == "windows" or (mode == "auto" and int(backbone.max_length) <= 512):
        raise PlanError(
            f"{name}: {backbone.name} reads through 512-token windows; the plan counts the single-input "
            "(Longformer) answerer of the paper's systems: pass backbone=longformer_large (the paper's), or an "
            "experiment (experiment=sa_musique_ans)"
        )
    top_k = int(cfg.model.top_k) if paragraphs_read is None else None
    train_read, dev_read = paragraphs_read or (top_k, top_k)
    eval_batch = int(cfg.model.eval_batch_size)
    window = int(backbone.get("attention_window", 512))

    def component(mode: str, batch: int, paragraphs: int) -> Component:
        text = int(stage.max_question_tokens) + paragraphs * (int(stage.max_paragraph_tokens) + 1)
        tokens = min(int(stage.max_document_tokens), text + READER_EXTRA_TOKENS)
        padded = math.ceil(tokens / window) * window  # a Longformer pads its input to its attention window
        checkpointing = mode == TRAIN and bool(stage.gradient_checkpointing)
        return Component(backbone.name, READER, mode, batch, padded, paragraphs, gradient_checkpointing=checkpointing)

    train = component(TRAIN, int(stage.micro_batch_size), train_read)
    predict = component(PREDICT, eval_batch, dev_read)
    return [
        train_work(name, train, split.train, split.unit, stage),
        *validation_stages(name, predict, split, stage, eval_batch),
        predict_work(name, "predict the dev split", predict, split.dev, split.unit, eval_batch),
    ]


def generative_stages(cfg: DictConfig, split: PlanSplits) -> list[StagePlan]:
    """SA (T5)'s answerer: a seq2seq model reading the top K (`max_paragraph_tokens` each) as one input of at most
    `max_source_tokens` (and its backbone's `max_length`), generating at most `max_target_tokens`."""
    stage = cfg.model.answerer
    text = int(stage.max_question_tokens) + int(cfg.model.top_k) * int(stage.max_paragraph_tokens)
    source = min(int(stage.max_source_tokens), int(stage.backbone.max_length), text)
    target = int(stage.max_target_tokens)
    return seq2seq_stages(
        cfg, "answerer", stage, split, source=source, target=target, generated=target, predict_examples=split.dev
    )


def seq2seq_component(stage: DictConfig, mode: str, batch: int, source: int, target: int) -> Component:
    """A seq2seq stage's component: `source` input tokens and `target` decoder tokens a row, beam search of the
    stage's `num_beams` when predicting."""
    beams = int(stage.num_beams) if mode == PREDICT else 1
    return Component(stage.backbone.name, SEQ2SEQ, mode, batch, source, target_tokens=target, beams=beams)


def seq2seq_stages(
    cfg: DictConfig,
    name: str,
    stage: DictConfig,
    split: PlanSplits,
    *,
    source: int,
    target: int,
    generated: int,
    predict_examples: int,
    predict_unit: str | None = None,
) -> list[StagePlan]:
    """A seq2seq stage: trained with teacher forcing on `target` tokens, validating and predicting by generating
    `generated` tokens (beam search of `num_beams`)."""
    eval_batch = int(cfg.model.eval_batch_size)
    train = seq2seq_component(stage, TRAIN, int(stage.micro_batch_size), source, target)
    generate = seq2seq_component(stage, PREDICT, eval_batch, source, generated)
    return [
        train_work(name, train, split.train, split.unit, stage),
        *validation_stages(name, generate, split, stage, eval_batch),
        predict_work(name, "predict the dev split", generate, predict_examples, predict_unit or split.unit, eval_batch),
    ]


def train_work(
    name: str, component: Component, examples: int, unit: str, stage: DictConfig, batch: int | None = None
) -> StagePlan:
    """Training: `max_epochs` passes over `examples`, `micro_batch_size` a step; an epoch of `batches_per_epoch`
    optimizer steps holds that many times `accumulate_grad_batches` steps."""
    accumulate = int(stage.get("accumulate_grad_batches") or 1)
    per_epoch = stage.get("batches_per_epoch")
    return StagePlan(
        stage=name,
        work="train",
        component=component,
        examples=examples,
        unit=unit,
        batch=batch or int(stage.micro_batch_size),
        repeats=int(stage.max_epochs),
        accumulate_grad_batches=accumulate,
        steps_cap=int(per_epoch) * accumulate if per_epoch else None,
    )


def predict_work(
    name: str, work: str, component: Component, examples: int, unit: str, batch: int | None = None, repeats: int = 1
) -> StagePlan:
    """Prediction work: `component` over `examples` (`unit`), `batch` a step (default: the component's), `repeats`
    times."""
    return StagePlan(name, work, component, examples, unit, batch or component.batch, repeats)
