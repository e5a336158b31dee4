"""Step Execution (EX, Trivedi et al., 2022): decompose the question into single-hop steps, answer them in order.

`model=step_execution executor=end2end|select_answer` runs every stage it needs in one command, each resumable:
1. `decomposer` (`musique_models.recipes.decomposer`): a seq2seq model writes each evaluation question's steps in
   the official step-token format (`model.decomposition=gold` skips it and executes the gold decomposition, the
   paper's oracle analysis; `model.decomposer_checkpoint=PATH` reuses a trained one);
2. the single-hop executor, trained on the single-hop questions derived from the gold decompositions
   (`musique_models.data.single_hop`): `executor_reader` (`executor=end2end`: the End2End reader over all
   paragraphs; MuSiQue-Ans: one supporting paragraph, a softmax over the markers), or `executor_selector` and
   `executor_answerer` (`executor=select_answer`: a selector ranks the paragraphs, the answerer reads the top K);
3. execution, hop by hop: step k of every question runs as one batched prediction, with each `#j` replaced by
   step j's predicted answer (a reference to a missing or later step becomes the empty string, as the official
   predictor does, and counts in `invalid_decompositions`).

The answer is the last step's; the support is the union of each step's most probable paragraph; with
unanswerable questions (MuSiQue-Full) a question is answerable only if every step is. `steps.jsonl` records every
executed step (sub-question, answer, confidence, paragraph) for error analysis.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import datasets
from omegaconf import DictConfig

from musique_models.data.schema import Example
from musique_models.data.single_hop import fill_references, single_hop_table
from musique_models.errors import ConfigValueError, check_choice
from musique_models.evaluation.gold import gold_from_example
from musique_models.evaluation.predictions import Prediction
from musique_models.io import write_jsonl
from musique_models.models.decoding import DecodedQuestion
from musique_models.recipes.base import RunContext
from musique_models.recipes.decomposer import Decomposer, DecomposerPredictor, require_decompositions
from musique_models.recipes.end2end import End2End
from musique_models.recipes.fitting import features_cache
from musique_models.recipes.planning import PlanError, PlanSplits, StagePlan, reader_stages, selector_stages
from musique_models.recipes.select_answer import SelectAnswer
from musique_models.run_files import STEPS_FILE

log = logging.getLogger(__name__)

EXECUTORS = ("end2end", "select_answer")
DECOMPOSITIONS = ("predicted", "gold")
EXECUTOR_READER = "executor_reader"
EXECUTOR_PREFIX = "executor_"


@dataclass
class ExecutedStep:
    """One executed step of one question."""

    step: int  # 1-based
    template: str  # the step as decomposed, `#k` for earlier answers
    question: str  # what the executor was asked
    answer: str
    confidence: float
    paragraph: int | None  # the step's most probable paragraph (original idx)
    answerable: bool


class SingleHopExecutor(Protocol):
    """Answers a table of single-hop questions (schema rows: `question`, `paragraphs`), one per row: the End2End
    and Select+Answer predictors."""

    def answer(self, table: datasets.Dataset) -> list[DecodedQuestion]: ...


def execute_steps(
    executor: SingleHopExecutor, table: datasets.Dataset, templates: list[list[str]]
) -> list[list[ExecutedStep]]:
    """Run the steps of every row of `table` (`templates[row]`: its steps with `#k` references) hop by hop: step k
    of every row that has one in one call of `executor.answer`, each `#j` filled with step j's predicted answer."""
    executed: list[list[ExecutedStep]] = [[] for _ in templates]
    with _quiet_datasets():  # a progress bar per hop table and featurisation: noise, and time in the per-question loop
        for hop in range(max((len(steps) for steps in templates), default=0)):
            _execute_hop(executor, table, templates, executed, hop)
    return executed


def _execute_hop(
    executor: SingleHopExecutor,
    table: datasets.Dataset,
    templates: list[list[str]],
    executed: list[list[ExecutedStep]],
    hop: int,
) -> None:
    """Step `hop` (0-based) of every row that has one, in one call of `executor.answer`; appended to `executed`."""
    active = [row for row, steps in enumerate(templates) if hop < len(steps)]
    questions = [fill_references(templates[row][hop], [step.answer for step in executed[row]]) for row in active]
    hop_table = table.select(active).remove_columns("question").add_column("question", questions)
    for row, question, decoded in zip(active, questions, executor.answer(hop_table)):
        executed[row].append(
            ExecutedStep(
                step=hop + 1,
                template=templates[row][hop],
                question=question,
                answer=decoded.answer,
                confidence=decoded.confidence,
                paragraph=decoded.top_paragraph,
                answerable=decoded.answerable,
            )
        )


@contextmanager
def _quiet_datasets() -> Iterator[None]:
    enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if enabled:
            datasets.enable_progress_bars()


def chain_prediction(question_id: str, steps: list[ExecutedStep]) -> Prediction:
    """The question's prediction from its executed steps: the last step's answer, the union of the steps'
    paragraphs, answerable only if every step is; its confidence is the chain's, the product of the steps'."""
    return Prediction(
        id=question_id,
        predicted_answer=steps[-1].answer if steps else "",
        predicted_support_idxs=sorted({step.paragraph for step in steps if step.paragraph is not None}),
        predicted_answerable=all(step.answerable for step in steps),
        predicted_answer_confidence=math.prod(step.confidence for step in steps) if steps else 0.0,
    )


class StepExecutionPredictor:
    """A trained decomposer (None: execute the gold decompositions) and single-hop executor, placed once."""

    def __init__(self, decomposer: DecomposerPredictor | None, executor: SingleHopExecutor) -> None:
        self.decomposer = decomposer
        self.executor = executor
        self.extra_metrics: dict[str, float | int] = {}

    def decompositions(self, table: datasets.Dataset, output_dir: Path) -> list[list[str]]:
        """Each row's steps (`#k` references): the gold ones, or the decomposer's, whose invalid ones are counted in
        `invalid_decompositions` and listed in the log. An empty decomposition executes the question itself."""
        if self.decomposer is None:
            if not any(table["decomposition"]):
                raise ConfigValueError(
                    "model.decomposition=gold needs gold decompositions, and these questions have none "
                    "(an unlabelled split): use model.decomposition=predicted"
                )
            steps_by_id = {
                question_id: [step["question"] for step in steps]
                for question_id, steps in zip(table["id"], table["decomposition"])
            }
        else:
            texts, parsed = self.decomposer.decompose(table, output_dir)
            invalid = {key: decomposition.problems for key, decomposition in parsed.items() if decomposition.invalid}
            self.extra_metrics["invalid_decompositions"] = len(invalid)
            for question_id, problems in invalid.items():
                log.warning(
                    "invalid decomposition of %s (%s): %s", question_id, "; ".join(problems), texts[question_id]
                )
            log.info("%d of %d predicted decompositions are invalid", len(invalid), len(parsed))
            steps_by_id = {
                question_id: [step for step in decomposition.steps if step.strip()]
                for question_id, decomposition in parsed.items()
            }
        return [steps_by_id[question_id] or [question] for question_id, question in zip(table["id"], table["question"])]

    def predict(self, table: datasets.Dataset, output_dir: Path) -> list[Prediction]:
        """Decompose, execute hop by hop, chain; writes `steps.jsonl` (and the decomposer's `decompositions.jsonl`)
        into `output_dir`."""
        self.extra_metrics = {}
        templates = self.decompositions(table, output_dir)
        most = max(map(len, templates))
        log.info("executing %d questions hop by hop (%d hop%s at most)", len(templates), most, "s" * (most != 1))
        executed = execute_steps(self.executor, table, templates)
        write_jsonl(
            Path(output_dir) / STEPS_FILE,
            [
                {"row": row, "id": question_id, **dataclasses.asdict(step)}
                for row, (question_id, steps) in enumerate(zip(table["id"], executed))
                for step in steps
            ],
        )
        return [chain_prediction(question_id, steps) for question_id, steps in zip(table["id"], executed)]


class StepExecution:
    """The Step Execution recipe; see the module docstring.

    `decomposer` holds the decomposer stage's settings, `reader` the End2End executor's, `selector` and `answerer`
    the Select+Answer executor's (`top_k` paragraphs read per step). `yes_no` as the other readers;
    `selector_checkpoint` reuses a trained single-hop selector, `empty_question` is End2End's (C-only) switch.
    """

    def __init__(
        self,
        executor: str,
        decomposer: DictConfig,
        reader: DictConfig,
        selector: DictConfig,
        answerer: DictConfig,
        decomposition: str = "predicted",
        decomposer_checkpoint: str | None = None,
        selector_checkpoint: str | None = None,
        empty_question: bool = False,
        top_k: int = 3,
        yes_no: str = "prefix",
        eval_batch_size: int = 16,
        num_workers: int = 0,
        name: str = "step_execution",
    ) -> None:
        check_choice("executor", executor, EXECUTORS)
        check_choice("model.decomposition", decomposition, DECOMPOSITIONS)
        self.name = name
        self.executor = executor
        self.decomposition = decomposition
        self.decomposer = Decomposer(decomposer, decomposer_checkpoint, eval_batch_size, num_workers)
        self.end2end = End2End(reader, yes_no, empty_question, eval_batch_size=eval_batch_size, num_workers=num_workers)
        self.select_answer = SelectAnswer(
            selector, answerer, top_k, yes_no, selector_checkpoint, eval_batch_size, num_workers
        )
        self.eval_batch_size = eval_batch_size

    def fit(self, context: RunContext) -> StepExecutionPredictor:
        """Train (or reuse) the decomposer, then the single-hop executor on the single-hop questions of the gold
        decompositions (validated on those of the evaluation split, unpaired)."""
        decomposer = self.decomposer.fit(context) if self.decomposition == "predicted" else None
        if decomposer is None:
            require_decompositions(context, self.name)
        cache = features_cache(context)
        single_train = single_hop_table(context.train, cache)
        single_eval = single_hop_table(context.evaluation, cache)
        single_context = dataclasses.replace(
            context,
            train=single_train,
            evaluation=single_eval,
            eval_golds=[gold_from_example(Example.from_dict(row), i) for i, row in enumerate(single_eval)],
            eval_paired=False,
        )
        if self.executor == "end2end":
            executor: SingleHopExecutor = self.end2end.fit(single_context, name=EXECUTOR_READER)
        else:
            executor = self.select_answer.fit(single_context, stage_prefix=EXECUTOR_PREFIX)
        return StepExecutionPredictor(decomposer, executor)

    def load(self, cfg: DictConfig, run_dir: Path) -> StepExecutionPredictor:
        """The best decomposer and executor of the finished run in `run_dir`; never trains."""
        decomposer = self.decomposer.load(cfg, run_dir) if self.decomposition == "predicted" else None
        if self.executor == "end2end":
            executor: SingleHopExecutor = self.end2end.load(cfg, run_dir, name=EXECUTOR_READER)
        else:
            executor = self.select_answer.load(cfg, run_dir, stage_prefix=EXECUTOR_PREFIX)
        return StepExecutionPredictor(decomposer, executor)

    @classmethod
    def plan(cls, cfg: DictConfig, splits: PlanSplits) -> list[StagePlan]:
        """The stages of a run: the decomposer (unless `decomposition=gold`), then the single-hop executor
        (`executor=end2end`: stage `executor_reader`; `select_answer`: `executor_selector` and `executor_answerer`)
        trained on one single-hop question per step of each training row's gold decomposition and executing each
        dev row's steps (as many as its gold decomposition has: the predicted ones, about)."""
        model = cfg.model
        if not splits.decompositions:
            raise PlanError(f"model={model.name} needs decompositions, and {splits.dataset} has none")
        stages = Decomposer.plan(cfg, splits) if model.decomposition == "predicted" else []
        single_hop = PlanSplits(
            train=round(splits.train * splits.support),
            dev=round(splits.dev * splits.support_dev),
            unit="single-hop questions",  # a step of a gold decomposition
            support=1.0,
            support_dev=1.0,
            paragraphs=splits.paragraphs,
        )
        if model.executor == "end2end":
            paragraphs = (splits.paragraphs, splits.paragraphs)
            return stages + reader_stages(cfg, model.reader, single_hop, EXECUTOR_READER, paragraphs)
        answerer = reader_stages(cfg, model.answerer, single_hop, f"{EXECUTOR_PREFIX}answerer")
        return stages + selector_stages(cfg, single_hop, EXECUTOR_PREFIX, answerer)
