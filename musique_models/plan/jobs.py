"""The plan of an experiment: its jobs (one for a system, 34 for `experiment=paper_grid`), each job's stages, and for
each stage what it computes: a `Component` (an architecture at one input shape and batch, training or predicting),
the examples it reads, its batch, its epochs and its steps.

The counts come from each job's composed config (batches, epochs, gradient accumulation, epochs of a fixed length,
K, token caps, validation, evaluation batches) and from `DATASET_FACTS`: each dataset's official split sizes,
paragraphs per question and hops, which no config holds. Two choices make every count an upper bound: each input
is taken at its token cap (shorter inputs cost less) and every epoch validates (early stopping can end a stage
sooner).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from musique_models import PROJECT_ROOT
from musique_models.errors import MusiqueModelsError
from musique_models.systems import system_name

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
class DatasetFacts:
    """What counting a dataset's steps needs from its official files: questions per split, paragraphs per
    question, the mean hops (supporting paragraphs; decomposition steps) of a question, and rows per question id
    (`twins`: 2 on MuSiQue-Full, each question with its unanswerable contrast)."""

    display_name: str
    train_questions: int
    dev_questions: int
    paragraphs: int
    hops_train: float
    hops_dev: float
    twins: int = 1
    decompositions: bool = True
    source: str = ""


# MuSiQue v1.0 (Trivedi et al., TACL 2022, dataset statistics): train 19,938 questions (2/3/4 hops: 14,376 /
# 4,387 / 1,175), dev 2,417 (1,252 / 760 / 405), 20 paragraphs each; MuSiQue-Full pairs each with its unanswerable
# contrast. HotpotQA (Yang et al., EMNLP 2018): train 90,447, dev (distractor) 7,405, 10 paragraphs, 2 supporting.
# 2WikiMultihopQA (Ho et al., COLING 2020): train 167,454, dev 12,576, 10 paragraphs; its bridge-comparison
# questions (train 15,008, dev 2,751) have 4 supporting paragraphs (4 evidence triples), the others 2.
DATASET_FACTS: dict[str, DatasetFacts] = {
    "musique_ans": DatasetFacts(
        "MuSiQue-Ans", 19_938, 2_417, 20, 46_613 / 19_938, 6_404 / 2_417, source="Trivedi et al., TACL 2022"
    ),
    "musique_full": DatasetFacts(
        "MuSiQue-Full", 19_938, 2_417, 20, 46_613 / 19_938, 6_404 / 2_417, twins=2, source="Trivedi et al., TACL 2022"
    ),
    "hotpotqa_20k": DatasetFacts(
        "HotpotQA", 90_447, 7_405, 10, 2.0, 2.0, decompositions=False, source="Yang et al., EMNLP 2018"
    ),
    "2wiki_20k": DatasetFacts(
        "2WikiMultihopQA",
        167_454,
        12_576,
        10,
        (2 * (167_454 - 15_008) + 4 * 15_008) / 167_454,
        (2 * (12_576 - 2_751) + 4 * 2_751) / 12_576,
        source="Ho et al., COLING 2020",
    ),
}


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
class JobPlan:
    """One job (a `train.py` run): its experiment, system row, model, dataset and the work of its stages."""

    name: str
    system: str | None
    model: str
    dataset: str
    train_rows: int
    dev_rows: int
    stages: tuple[StagePlan, ...]

    def steps(self, mode: str) -> int:
        """The job's steps of one mode (`train` or `predict`)."""
        return sum(stage.steps for stage in self.stages if stage.component.mode == mode)

    def as_dict(self) -> dict[str, Any]:
        """The job and its stages (JSON)."""
        return {
            "name": self.name,
            "system": self.system,
            "model": self.model,
            "dataset": self.dataset,
            "train_rows": self.train_rows,
            "dev_rows": self.dev_rows,
            "train_steps": self.steps(TRAIN),
            "predict_steps": self.steps(PREDICT),
            "stages": [stage.as_dict() for stage in self.stages],
        }


@dataclass(frozen=True)
class _Split:
    """What a job's stages read: `train` and `dev` rows, what a row is (`unit`), a training row's and a dev row's
    mean supporting paragraphs (`support`, `support_dev`), paragraphs a row and rows a question id (`twins`)."""

    train: int
    dev: int
    unit: str
    support: float
    support_dev: float
    paragraphs: int
    twins: int = 1


def components(jobs: Sequence[JobPlan]) -> dict[str, Component]:
    """Every distinct component of the jobs, by key, in order of first use."""
    found: dict[str, Component] = {}
    for job in jobs:
        for stage in job.stages:
            found.setdefault(stage.component.key, stage.component)
    return found


def dataset_facts(name: str) -> DatasetFacts:
    """The facts of dataset `name` (`DATASET_FACTS`); `PlanError` naming the known ones otherwise."""
    if name not in DATASET_FACTS:
        raise PlanError(
            f"dataset.name={name!r}: the plan knows the split sizes of {', '.join(DATASET_FACTS)} only "
            "(musique_models/plan/jobs.py: DATASET_FACTS)"
        )
    return DATASET_FACTS[name]


def plan_job(cfg: DictConfig) -> JobPlan:
    """The plan of one composed `train.py` config (a job)."""
    if cfg.dataset.get("sample"):
        raise PlanError(
            f"dataset.sample=true ({cfg.dataset.name}'s shipped sample): the plan counts runs on the official files; "
            "pass an experiment (experiment=sa_musique_ans) or dataset.sample=false"
        )
    facts = dataset_facts(cfg.dataset.name)
    train_size = cfg.dataset.get("train_size")
    train_questions = facts.train_questions if train_size is None else min(int(train_size), facts.train_questions)
    eval_size = cfg.get("eval_size")
    dev_questions = facts.dev_questions if eval_size is None else min(int(eval_size), facts.dev_questions)
    unit = "questions" if facts.twins == 1 else "rows"  # MuSiQue-Full: a question and its unanswerable twin
    split = _Split(
        train_questions * facts.twins,
        dev_questions * facts.twins,
        unit,
        facts.hops_train,
        facts.hops_dev,
        facts.paragraphs,
        facts.twins,
    )
    target = str(cfg.model._target_).rsplit(".", 1)[-1]
    planner = _PLANNERS.get(target)
    if planner is None:
        raise PlanError(
            f"model={cfg.model.name} ({target}): the plan counts the paper's systems' recipes only "
            f"({', '.join(sorted(_PLANNERS))})"
        )
    stages = planner(cfg, split, facts, dev_questions)
    return JobPlan(
        name=str(OmegaConf.select(cfg, "experiment_name", default=None) or f"{cfg.model.name}_{cfg.dataset.name}"),
        system=_system(cfg),
        model=str(cfg.model.name),
        dataset=str(cfg.dataset.name),
        train_rows=split.train,
        dev_rows=split.dev,
        stages=tuple(stages),
    )


def _system(cfg: DictConfig) -> str | None:
    model = cfg.model
    return system_name(
        {"model_name": model.name, "executor": cfg.get("executor"), "model": {"executor": model.get("executor")}}
    )


# ---- the recipes' stages --------------------------------------------------------------------------------------


def _select_answer(cfg: DictConfig, split: _Split, facts: DatasetFacts, dev_questions: int) -> list[StagePlan]:
    """Select+Answer and 1-Para (`recipes/select_answer.py`): the selector, its rankings, the answerer on its top K."""
    return _selector_then(cfg, split, "", _reader_stages(cfg, cfg.model.answerer, split, "answerer"))


def _select_generate(cfg: DictConfig, split: _Split, facts: DatasetFacts, dev_questions: int) -> list[StagePlan]:
    """SA (T5) (`recipes/generative.py`: SelectGenerate): Select+Answer's selector, a seq2seq answerer on its top K."""
    return _selector_then(cfg, split, "", _generative_stages(cfg, split))


def _beam_select_answer(cfg: DictConfig, split: _Split, facts: DatasetFacts, dev_questions: int) -> list[StagePlan]:
    """Beam SA (`recipes/beam.py`): Beam Retrieval, its chains, Select+Answer's answerer reading each chain."""
    model = cfg.model
    retriever = model.selector
    eval_batch = int(model.eval_batch_size)
    # the mean hops rounded up: a question's retrieval work grows with its hops, so the count stays an upper bound
    hops = math.ceil(split.support)
    backbone = retriever.backbone.name
    shape = {
        "backbone": backbone,
        "kind": BEAM_RETRIEVER,
        "tokens": min(int(retriever.max_length), int(retriever.backbone.max_length)),
        "paragraphs": split.paragraphs,
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
        answerable = split.train // split.twins
        stages.append(_train("selector", train, answerable, "answerable rows", retriever))
        stages += _validations("selector", predict, split, retriever, eval_batch)
    stages += _rankings("selector", predict, split, model.answerer, eval_batch, rows_are_pairs=False)
    # the answerer reads the chain: a question's hops (rounded up)
    paragraphs_read = (math.ceil(split.support), math.ceil(split.support_dev))
    return stages + _reader_stages(cfg, model.answerer, split, "answerer", paragraphs_read)


def _end2end(cfg: DictConfig, split: _Split, facts: DatasetFacts, dev_questions: int) -> list[StagePlan]:
    """End2End and C-only (`recipes/end2end.py`): one reader over every paragraph, as stage `<model name>`."""
    paragraphs = (split.paragraphs, split.paragraphs)
    return _reader_stages(cfg, cfg.model.reader, split, str(cfg.model.name), paragraphs)


def _question_only(cfg: DictConfig, split: _Split, facts: DatasetFacts, dev_questions: int) -> list[StagePlan]:
    """Q-only (`recipes/question_only.py`): a seq2seq answerer reading the question alone, stage `answerer`."""
    stage = cfg.model.answerer
    source = int(stage.max_question_tokens) + 2
    return _seq2seq_stages(
        cfg,
        "answerer",
        stage,
        split,
        source=source,
        target=int(stage.max_answer_tokens) + 2,
        generated=int(stage.max_answer_tokens) + 1,
        predict_examples=split.dev,
    )


def _decomposer(cfg: DictConfig, split: _Split, facts: DatasetFacts, dev_questions: int) -> list[StagePlan]:
    """The decomposer (`recipes/decomposer.py`), alone or as Step Execution's first stage: trained on every
    training row, validated on the dev rows, then decomposing each dev question once."""
    if not facts.decompositions:
        raise PlanError(f"model={cfg.model.name} needs decompositions, and {facts.display_name} has none")
    if cfg.model.get("decomposer_checkpoint"):
        return _decompositions(cfg, split, dev_questions)
    stage = cfg.model.decomposer
    return _seq2seq_stages(
        cfg,
        "decomposer",
        stage,
        split,
        source=int(stage.max_source_tokens) + 2,
        target=int(stage.max_target_tokens),
        generated=int(stage.max_target_tokens),
        predict_examples=dev_questions,
        predict_unit="question ids",  # one decomposition per question id
    )


def _decompositions(cfg: DictConfig, split: _Split, dev_questions: int) -> list[StagePlan]:
    """A reused decomposer (`decomposer_checkpoint`): only its decompositions of the dev questions."""
    stage = cfg.model.decomposer
    generate = _seq2seq_component(
        stage, PREDICT, int(cfg.model.eval_batch_size), int(stage.max_source_tokens) + 2, int(stage.max_target_tokens)
    )
    return [_predict("decomposer", "decompose the dev questions", generate, dev_questions, "questions")]


def _step_execution(cfg: DictConfig, split: _Split, facts: DatasetFacts, dev_questions: int) -> list[StagePlan]:
    """Step Execution (`recipes/step_execution.py`): the decomposer (unless `decomposition=gold`), then the
    single-hop executor (`executor=end2end`: stage `executor_reader`; `select_answer`: `executor_selector` and
    `executor_answerer`) trained on one single-hop question per step of each training row's gold decomposition and
    executing each dev row's steps (as many as its gold decomposition has: the predicted ones, about)."""
    model = cfg.model
    if not facts.decompositions:
        raise PlanError(f"model={model.name} needs decompositions, and {facts.display_name} has none")
    stages = _decomposer(cfg, split, facts, dev_questions) if model.decomposition == "predicted" else []
    single_hop = _Split(
        train=round(split.train * split.support),
        dev=round(split.dev * split.support_dev),
        unit="single-hop questions",  # a step of a gold decomposition
        support=1.0,
        support_dev=1.0,
        paragraphs=split.paragraphs,
    )
    if model.executor == "end2end":
        paragraphs = (split.paragraphs, split.paragraphs)
        return stages + _reader_stages(cfg, model.reader, single_hop, "executor_reader", paragraphs)
    answerer = _reader_stages(cfg, model.answerer, single_hop, "executor_answerer")
    return stages + _selector_then(cfg, single_hop, "executor_", answerer)


# ---- stages shared by the recipes -----------------------------------------------------------------------------


def _selector_then(cfg: DictConfig, split: _Split, prefix: str, answerer_stages: list[StagePlan]) -> list[StagePlan]:
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
        stages.append(_train(name, train, split.train, split.unit, selector, batch=int(selector.micro_batch_size)))
        stages += _validations(name, predict, split, selector, eval_batch, rows_are_pairs=True)
    stages += _rankings(name, predict, split, model.answerer, eval_batch, rows_are_pairs=True)
    return stages + answerer_stages


def _rankings(
    name: str, predict: Component, split: _Split, answerer: DictConfig, eval_batch: int, rows_are_pairs: bool
) -> list[StagePlan]:
    """The first stage ranks the training split (what the answerer trains on) and the dev split: for the
    answerer's validation (when it validates) and for the final prediction."""
    per_row = split.paragraphs if rows_are_pairs else 1
    unit = "pairs" if rows_are_pairs else split.unit  # a pair: a row and one of its paragraphs
    dev_rankings = 2 if answerer.validate else 1
    return [
        _predict(name, "rank the training split", predict, split.train * per_row, unit, eval_batch),
        _predict(name, "rank the dev split", predict, split.dev * per_row, unit, eval_batch, repeats=dev_rankings),
    ]


def _validations(
    name: str, predict: Component, split: _Split, stage: DictConfig, eval_batch: int, rows_are_pairs: bool = False
) -> list[StagePlan]:
    """One prediction over the dev split every `check_val_every_n_epoch` epochs, when the stage validates (every
    epoch counted: early stopping can end the stage sooner)."""
    if not stage.validate:
        return []
    per_row = split.paragraphs if rows_are_pairs else 1
    unit = "pairs" if rows_are_pairs else split.unit  # a pair: a row and one of its paragraphs
    validations = int(stage.max_epochs) // int(stage.check_val_every_n_epoch)
    return [_predict(name, "validate", predict, split.dev * per_row, unit, eval_batch, repeats=validations)]


def _reader_stages(
    cfg: DictConfig,
    stage: DictConfig,
    split: _Split,
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
            "(Longformer) answerer of the paper's systems"
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
        _train(name, train, split.train, split.unit, stage),
        *_validations(name, predict, split, stage, eval_batch),
        _predict(name, "predict the dev split", predict, split.dev, split.unit, eval_batch),
    ]


def _generative_stages(cfg: DictConfig, split: _Split) -> list[StagePlan]:
    """SA (T5)'s answerer: a seq2seq model reading the top K (`max_paragraph_tokens` each) as one input of at most
    `max_source_tokens` (and its backbone's `max_length`), generating at most `max_target_tokens`."""
    stage = cfg.model.answerer
    text = int(stage.max_question_tokens) + int(cfg.model.top_k) * int(stage.max_paragraph_tokens)
    source = min(int(stage.max_source_tokens), int(stage.backbone.max_length), text)
    target = int(stage.max_target_tokens)
    return _seq2seq_stages(
        cfg, "answerer", stage, split, source=source, target=target, generated=target, predict_examples=split.dev
    )


def _seq2seq_component(stage: DictConfig, mode: str, batch: int, source: int, target: int) -> Component:
    beams = int(stage.num_beams) if mode == PREDICT else 1
    return Component(stage.backbone.name, SEQ2SEQ, mode, batch, source, target_tokens=target, beams=beams)


def _seq2seq_stages(
    cfg: DictConfig,
    name: str,
    stage: DictConfig,
    split: _Split,
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
    train = _seq2seq_component(stage, TRAIN, int(stage.micro_batch_size), source, target)
    generate = _seq2seq_component(stage, PREDICT, eval_batch, source, generated)
    return [
        _train(name, train, split.train, split.unit, stage),
        *_validations(name, generate, split, stage, eval_batch),
        _predict(name, "predict the dev split", generate, predict_examples, predict_unit or split.unit, eval_batch),
    ]


def _train(
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


def _predict(
    name: str, work: str, component: Component, examples: int, unit: str, batch: int | None = None, repeats: int = 1
) -> StagePlan:
    return StagePlan(name, work, component, examples, unit, batch or component.batch, repeats)


_PLANNERS = {
    "SelectAnswer": _select_answer,
    "SelectGenerate": _select_generate,
    "BeamSelectAnswer": _beam_select_answer,
    "End2End": _end2end,
    "QuestionOnly": _question_only,
    "Decomposer": _decomposer,
    "StepExecution": _step_execution,
}


# ---- composing an experiment ----------------------------------------------------------------------------------

_BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def job_overrides(overrides: Sequence[str]) -> list[list[str]]:
    """Each job's overrides of `python train.py OVERRIDES` (a multirun's, as Hydra's basic sweeper makes them,
    e.g. the 34 of `experiment=paper_grid`; one job otherwise)."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
    sweeper = cfg.hydra.sweeper
    params = []
    if sweeper.get("_target_") == _BASIC_SWEEPER:
        params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create().parse_overrides([*params, *overrides])
    return [list(job) for batch in BasicSweeper.split_arguments(parsed, max_batch_size=None) for job in batch]


def plan_experiment(overrides: Sequence[str]) -> list[JobPlan]:
    """The plan of `python train.py OVERRIDES`: every job's (e.g. `["experiment=paper_grid"]`: 34 jobs)."""
    from hydra import compose, initialize_config_dir

    jobs = job_overrides(overrides)
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return [plan_job(compose("train", overrides=job)) for job in jobs]
