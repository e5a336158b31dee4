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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import datasets
import torch
from omegaconf import DictConfig

from musique_models.data.schema import Example
from musique_models.data.single_hop import fill_references, single_hop_table
from musique_models.errors import check_choice
from musique_models.evaluation.gold import gold_from_example
from musique_models.evaluation.predictions import Prediction
from musique_models.features.selector import featurize_selector
from musique_models.io import write_jsonl
from musique_models.models.decoding import DecodedQuestion
from musique_models.models.selector import rank_paragraphs
from musique_models.recipes.base import RunContext
from musique_models.recipes.decomposer import Decomposer, require_decompositions
from musique_models.recipes.end2end import End2End, in_dataset_order
from musique_models.recipes.reader import FittedReader
from musique_models.recipes.select_answer import FittedSelectAnswer, SelectAnswer
from musique_models.training.datamodule import featurize
from musique_models.training.inference import BatchPredictor

log = logging.getLogger(__name__)

EXECUTORS = ("end2end", "select_answer")
DECOMPOSITIONS = ("predicted", "gold")
STEPS_FILE = "steps.jsonl"


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
    """Answers a table of single-hop questions (schema rows: `question`, `paragraphs`), one per row."""

    def answer(self, table: datasets.Dataset) -> list[DecodedQuestion]: ...


class ReaderExecutor:
    """A reader over every paragraph in dataset order (`executor=end2end`). The model is placed once."""

    def __init__(self, fitted: FittedReader, cfg: DictConfig, batch_size: int) -> None:
        self.fitted = fitted
        self.predictor = BatchPredictor(fitted.reader, fitted.tokenizer, cfg, batch_size)

    def answer(self, table: datasets.Dataset) -> list[DecodedQuestion]:
        table = in_dataset_order(table)
        rows = featurize(table, self.fitted.featurizer, self.fitted.tokenizer, None, "hop", **self.fitted.settings)
        return decode_reader_outputs(self.fitted, self.predictor.outputs(rows), table)


class SelectAnswerExecutor:
    """A selector ranks each question's paragraphs, the answerer reads the top K (`executor=select_answer`). Both
    models are placed once."""

    def __init__(self, fitted: FittedSelectAnswer, cfg: DictConfig, batch_size: int) -> None:
        self.fitted = fitted
        self.selector = BatchPredictor(fitted.selector, fitted.selector_tokenizer, cfg, batch_size)
        self.answerer = BatchPredictor(fitted.answerer.reader, fitted.answerer.tokenizer, cfg, batch_size)

    def answer(self, table: datasets.Dataset) -> list[DecodedQuestion]:
        fitted = self.fitted
        pairs = featurize(table, featurize_selector, fitted.selector_tokenizer, None, "hop", **fitted.selector_settings)
        outputs = self.selector.outputs(pairs)
        columns = {
            key: torch.cat([output[key] for output in outputs]) for key in ("example_row", "paragraph_idx", "score")
        }
        rankings = rank_paragraphs(
            columns["example_row"].tolist(), columns["paragraph_idx"].tolist(), columns["score"].tolist()
        )
        table = table.add_column("selected_idxs", [rankings[row][: fitted.top_k] for row in range(len(table))])
        answerer = fitted.answerer
        rows = featurize(table, answerer.featurizer, answerer.tokenizer, None, "hop", **answerer.settings)
        return decode_reader_outputs(answerer, self.answerer.outputs(rows), table)


def decode_reader_outputs(fitted: FittedReader, outputs: list, table: datasets.Dataset) -> list[DecodedQuestion]:
    """The decoded question of every row of `table` from a reader's prediction outputs."""
    windows = torch.cat([output[0] for output in outputs])
    markers = torch.cat([output[1] for output in outputs])
    return fitted.reader.decode_questions(windows, markers, len(table), fitted.context_builder(table))


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
    paragraphs, answerable only if every step is."""
    return Prediction(
        id=question_id,
        predicted_answer=steps[-1].answer if steps else "",
        predicted_support_idxs=sorted({step.paragraph for step in steps if step.paragraph is not None}),
        predicted_answerable=all(step.answerable for step in steps),
    )


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
        self.extra_metrics: dict[str, float] = {}

    def run(self, context: RunContext) -> list[Prediction]:
        require_decompositions(context, self.name)
        evaluation = context.evaluation
        templates_by_id = self._decompositions(context)
        templates = [
            templates_by_id[question_id] or [question]
            for question_id, question in zip(evaluation["id"], evaluation["question"])
        ]
        executor = self._fit_executor(context)
        log.info("executing %d questions hop by hop (%d hops at most)", len(templates), max(map(len, templates)))
        executed = execute_steps(executor, evaluation, templates)
        write_jsonl(
            Path(context.run_dir) / STEPS_FILE,
            [
                {"row": row, "id": question_id, **dataclasses.asdict(step)}
                for row, (question_id, steps) in enumerate(zip(evaluation["id"], executed))
                for step in steps
            ],
        )
        return [chain_prediction(question_id, steps) for question_id, steps in zip(evaluation["id"], executed)]

    def _decompositions(self, context: RunContext) -> dict[str, list[str]]:
        """Each evaluation question's steps (`#k` references): the gold ones, or the decomposer's (trained here or
        reused), whose invalid ones are counted in `invalid_decompositions` and listed in the log."""
        evaluation = context.evaluation
        if self.decomposition == "gold":
            return {
                question_id: [step["question"] for step in steps]
                for question_id, steps in zip(evaluation["id"], evaluation["decomposition"])
            }
        fitted = self.decomposer.fit(context)
        texts, parsed = self.decomposer.decompose(fitted, context)
        invalid = {
            question_id: decomposition.problems
            for question_id, decomposition in parsed.items()
            if decomposition.invalid
        }
        self.extra_metrics["invalid_decompositions"] = float(len(invalid))
        for question_id, problems in invalid.items():
            log.warning("invalid decomposition of %s (%s): %s", question_id, "; ".join(problems), texts[question_id])
        log.info("%d of %d predicted decompositions are invalid", len(invalid), len(parsed))
        return {
            question_id: [step for step in decomposition.steps if step.strip()]
            for question_id, decomposition in parsed.items()
        }

    def _fit_executor(self, context: RunContext) -> SingleHopExecutor:
        """Train the single-hop executor on the single-hop questions of the gold decompositions (validated on those
        of the evaluation split, unpaired) and place it for execution."""
        cache = f"{context.cfg.paths.cache_dir}/features"
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
            reader, _, _ = self.end2end.fit(single_context, name="executor_reader")
            return ReaderExecutor(reader, context.cfg, self.eval_batch_size)
        fitted, _, _ = self.select_answer.fit(single_context, stage_prefix="executor_")
        return SelectAnswerExecutor(fitted, context.cfg, self.eval_batch_size)
