"""Generative readers as systems (`musique_models.models.generative_reader.GenerativeReader`: a seq2seq model or a
decoder-only LLM writing `answer: ... | support: ... | answerable: ...`).

- `model=select_generate`: Select+Answer with a generative answerer over the selector's top K: the paper's
  "SA with a T5 answerer" (Section 8.3; `experiment=sa_t5_<dataset>`), or a fine-tuned LLM
  (`backbone@model.answerer.backbone=qwen2_5_1_5b_instruct model.answerer.finetune=lora`).
- `model=generative_reader`: one generative reader over ALL the paragraphs of a question, in dataset order (where
  the backbone's context holds them).
- `model=llm_prompt`: a decoder-only LLM prompted with no training, zero- or k-shot (`model.shots=k`), over all
  paragraphs or a trained selector's top K (`model.selector_checkpoint=PATH`).

Every prediction goes through `parse_generation`: a generation it cannot read fully still gives a prediction, is
counted in `metrics.json` (`unparsed_generations`) and listed in the run's log; every raw generation is written to
`generations.jsonl` beside the predictions (the error browser shows it).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import datasets
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from musique_models.errors import MusiqueModelsError, check_choice
from musique_models.evaluation.predictions import Prediction
from musique_models.features.generative import draw_exemplars, featurize_generative, parse_generation
from musique_models.io import write_json
from musique_models.models.backbone import BackboneSpec, load_tokenizer
from musique_models.models.decoding import DecodedQuestion
from musique_models.models.generative_reader import GenerativeReader
from musique_models.models.selector import load_selector
from musique_models.recipes.base import RunContext, decoded_predictions
from musique_models.recipes.fitting import StageInputs, fit_stage
from musique_models.recipes.planning import PlanSplits, StagePlan, generative_stages, selector_stages
from musique_models.recipes.reader import reader_monitor
from musique_models.recipes.select_answer import FittedRanker, FittedSelector, SelectAnswer, SelectorRanker, with_top_k
from musique_models.run_files import EXEMPLARS_FILE, GENERATION_SPEED_FILE, GENERATIONS_FILE, write_side_file
from musique_models.settings import dataset_setting
from musique_models.training.datamodule import featurize
from musique_models.training.inference import BatchPredictor
from musique_models.training.stage import finished_checkpoint, finished_stage

log = logging.getLogger(__name__)
# How many unparsed generations a prediction prints (with their problems); generations.jsonl holds them all.
UNPARSED_SHOWN = 3


def _clipped(text: str, limit: int = 200) -> str:
    """`text` cut to `limit` characters, with `...` where it was cut."""
    return text if len(text) <= limit else text[:limit] + "..."


ENGINES = ("hf", "vllm")
READER_STAGE = "reader"  # the generative reader's stage (and a prompted LLM's, in an export)


def generative_settings(
    stage_cfg: DictConfig,
    cfg: DictConfig,
    backbone: BackboneSpec,
    with_answerability: bool,
    exemplars: list[dict] | None = None,
) -> dict[str, Any]:
    """`featurize_generative` settings of a stage on `backbone` under the run's config `cfg` (the input is capped
    by the backbone's `max_length` as well as by `max_source_tokens`)."""
    return {
        "causal": backbone.causal,
        "max_question_tokens": stage_cfg.max_question_tokens,
        "max_paragraph_tokens": stage_cfg.max_paragraph_tokens,
        "max_source_tokens": min(stage_cfg.max_source_tokens, backbone.max_length),
        "max_target_tokens": stage_cfg.max_target_tokens,
        "include_title": bool(dataset_setting(cfg.dataset, "include_title")),
        "with_answerability": with_answerability,
        "exemplars": list(exemplars or []),
    }


def build_generative_reader(
    stage_cfg: DictConfig, backbone: BackboneSpec, tokenizer: Any, with_answerability: bool, **kwargs: Any
) -> GenerativeReader:
    """The module of a generative stage from its settings."""
    return GenerativeReader(
        backbone,
        len(tokenizer),
        tokenizer.pad_token_id,
        with_answerability=with_answerability,
        finetune=stage_cfg.finetune,
        lora_r=stage_cfg.lora_r,
        lora_alpha=stage_cfg.lora_alpha,
        lora_dropout=stage_cfg.lora_dropout,
        lora_target_modules=_plain(stage_cfg.lora_target_modules),
        lora_modules_to_save=_plain(stage_cfg.lora_modules_to_save),
        lr=stage_cfg.lr,
        warmup_ratio=stage_cfg.warmup_ratio,
        schedule=stage_cfg.schedule,
        label_smoothing=stage_cfg.label_smoothing,
        num_beams=stage_cfg.num_beams,
        max_target_tokens=stage_cfg.max_target_tokens,
        guided_format=stage_cfg.get("guided_format", False),
        **kwargs,
    )


def _plain(value: Any) -> Any:
    """A config value as plain Python (a list node becomes a list; checkpoints keep plain values)."""
    return OmegaConf.to_object(value) if OmegaConf.is_config(value) else value


@dataclass
class Generation:
    """One row's raw generation and what its parse could not read."""

    id: str
    text: str
    problems: tuple[str, ...]


@dataclass
class FittedGenerativeReader:
    """A trained (or prompted) generative reader with the tokenizer and featuriser settings that feed it."""

    reader: GenerativeReader
    tokenizer: Any
    settings: dict[str, Any]
    engine: str = "hf"

    def predictor(self, cfg: DictConfig, batch_size: int) -> GenerativeReaderPredictor:
        return GenerativeReaderPredictor(self, cfg, batch_size)


@dataclass
class GenerationSpeed:
    """How long a read's generation took (transformers' engine): its questions, their prompt tokens, the tokens
    generated (padding not counted), the seconds of the batched generation."""

    questions: int
    prompt_tokens: int
    generated_tokens: int
    seconds: float

    def line(self) -> str:
        return (
            f"generated {self.generated_tokens} tokens for {self.questions} questions in {self.seconds:.1f} s: "
            f"{self.generated_tokens / max(self.seconds, 1e-9):.1f} generated tokens/s, "
            f"{(self.prompt_tokens + self.generated_tokens) / max(self.seconds, 1e-9):.0f} tokens/s with the prompts "
            f"({self.prompt_tokens / max(self.questions, 1):.0f} prompt tokens a question)"
        )


class GenerativeReaderPredictor:
    """A generative reader placed once: `read(table)` generates for every row (batched, length-sorted), parses and
    decodes; `finish(output_dir)` writes the last read's `generations.jsonl` and `generation_speed.json` and
    returns `unparsed_generations`."""

    def __init__(self, fitted: FittedGenerativeReader, cfg: DictConfig, batch_size: int) -> None:
        self.fitted = fitted
        self.engine = VllmEngine(fitted) if fitted.engine == "vllm" else None
        self.batches = None if self.engine else BatchPredictor(fitted.reader, fitted.tokenizer, cfg, batch_size)
        self.generations: list[Generation] = []
        self.speed: GenerationSpeed | None = None

    def generate(self, table: datasets.Dataset) -> tuple[list[str], list[float], list[set[int]]]:
        """Every row's generated text, its probability and the idx of the paragraphs it read."""
        fitted = self.fitted
        rows = featurize(table, featurize_generative, fitted.tokenizer, None, "generate", **fitted.settings)
        read: list[set[int]] = [set() for _ in range(len(table))]
        for row, idxs in zip(rows["example_row"], rows["read_idxs"], strict=True):
            read[row] = set(idxs)
        if self.engine is not None:
            return (*self.engine.generate(rows), read)
        texts, confidences = [""] * len(table), [0.0] * len(table)
        start, generated = time.perf_counter(), 0
        causal = fitted.reader.causal
        prompts = sum(rows["prompt_length"]) if causal else sum(len(ids) for ids in rows["input_ids"])
        for output in self.batches.outputs(rows):
            generated += int((output["ids"] != fitted.reader.pad_token_id).sum())
            for row, text, confidence in zip(
                output["example_row"].tolist(),
                fitted.reader.texts(output["ids"]),
                output["confidence"].tolist(),
                strict=True,
            ):
                texts[row], confidences[row] = text, confidence
        self.speed = GenerationSpeed(len(table), prompts, generated, round(time.perf_counter() - start, 3))
        log.info("%s", self.speed.line())
        return texts, confidences, read

    def read(self, table: datasets.Dataset) -> list[DecodedQuestion]:
        """The decoded question of every row of `table` (its `selected_idxs`, when present, say what is read)."""
        texts, confidences, read_idxs = self.generate(table)
        with_answerability = self.fitted.settings["with_answerability"]
        decoded, self.generations = [], []
        for question_id, read, text, confidence in zip(table["id"], read_idxs, texts, confidences, strict=True):
            # a paragraph the reader did not read (cut by max_source_tokens, or outside a selector's top K) is no support
            parsed = parse_generation(text, read, with_answerability)
            self.generations.append(Generation(question_id, text, parsed.problems))
            decoded.append(
                DecodedQuestion(
                    answer=parsed.answer,
                    confidence=confidence,
                    support=parsed.support,
                    support_probs={},
                    answerable=parsed.answerable,
                    answerable_prob=float(parsed.answerable),
                )
            )
        unparsed = [generation for generation in self.generations if generation.problems]
        if unparsed:
            shown = unparsed[:UNPARSED_SHOWN]
            more = f"; every one is in {GENERATIONS_FILE}" if len(unparsed) > len(shown) else ""
            log.warning(
                "%d of %d generations could not be read in full; the first %d%s:\n%s",
                len(unparsed),
                len(self.generations),
                len(shown),
                more,
                "\n".join(
                    f"  {generation.id}: {'; '.join(generation.problems)}: {_clipped(generation.text)!r}"
                    for generation in shown
                ),
            )
        return decoded

    def finish(self, output_dir: Path) -> dict[str, float | int]:
        """Writes `generations.jsonl` (each row's id, raw generation and parse problems, in table order; declared as a
        side file, which the error browser shows) and, from
        transformers' engine, `generation_speed.json`."""
        if self.speed is not None:
            write_json(Path(output_dir) / GENERATION_SPEED_FILE, asdict(self.speed))
        write_side_file(
            output_dir,
            GENERATIONS_FILE,
            "raw generation",
            [
                {"row": row, "id": generation.id, "generation": generation.text, "problems": list(generation.problems)}
                for row, generation in enumerate(self.generations)
            ],
        )
        return {"unparsed_generations": sum(bool(generation.problems) for generation in self.generations)}


class VllmEngine:
    """Generation by vLLM (`model.engine=vllm`, on a CUDA machine with the `vllm` extra): the same prompts (token
    ids), greedy, at most `max_target_tokens` tokens; the confidence is exp of vLLM's cumulative log-probability."""

    def __init__(self, fitted: FittedGenerativeReader) -> None:
        from vllm import LLM  # the extra; `require_engine` says so when it is missing

        spec: BackboneSpec = fitted.reader.hparams.backbone
        self.max_tokens = int(fitted.reader.max_target_tokens)
        self.llm = LLM(model=spec.model_dir(), tokenizer=spec.model_dir(), seed=0)
        self.tokenizer = fitted.tokenizer

    def generate(self, rows: datasets.Dataset) -> tuple[list[str], list[float]]:
        import math

        from vllm import SamplingParams, TokensPrompt

        prompts = [
            TokensPrompt(prompt_token_ids=ids[:length])
            for ids, length in zip(rows["input_ids"], rows["prompt_length"], strict=True)
        ]
        params = SamplingParams(temperature=0.0, max_tokens=self.max_tokens, logprobs=0)
        texts, confidences = [""] * len(rows), [0.0] * len(rows)
        for row, output in zip(rows["example_row"], self.llm.generate(prompts, params), strict=True):
            completion = output.outputs[0]
            texts[row] = self.tokenizer.decode(completion.token_ids, skip_special_tokens=True).strip()
            confidences[row] = math.exp(completion.cumulative_logprob or 0.0)
        return texts, confidences


def require_engine(engine: str, backbone: BackboneSpec, guided_format: bool = False) -> None:
    """One line when the engine cannot run: vLLM not installed, or a backbone it cannot load."""
    check_choice("model.engine", engine, ENGINES)
    if engine != "vllm":
        return
    if guided_format:  # said first: it holds whether vLLM is installed or not
        raise MusiqueModelsError(
            "model.engine=vllm generates without the format guide: set model.reader.guided_format=false, or "
            "model.engine=hf"
        )
    if importlib.util.find_spec("vllm") is None:
        raise MusiqueModelsError(
            "model.engine=vllm: vLLM is not installed (pip install -e '.[vllm]' in this checkout, on a CUDA machine); "
            "model.engine=hf generates with transformers"
        )
    if backbone.source == "random" or not backbone.causal:
        raise MusiqueModelsError(
            f"model.engine=vllm: backbone {backbone.name!r} is not a pretrained decoder-only model vLLM can load"
        )


class GenerativePredictor:
    """A generative reader over all the paragraphs of each row, or over a trained selector's top `top_k` (`ranker`).
    A table that holds one of the reader's k-shot exemplars is refused."""

    def __init__(
        self,
        fitted: FittedGenerativeReader,
        cfg: DictConfig,
        batch_size: int,
        ranker: SelectorRanker | None = None,
        top_k: int | None = None,
    ) -> None:
        self.reader = fitted.predictor(cfg, batch_size)
        self.ranker = ranker
        self.top_k = top_k
        self.exemplar_ids = {exemplar["id"] for exemplar in fitted.settings["exemplars"]}
        self.extra_metrics: dict[str, float | int] = {}

    def predict(self, table: datasets.Dataset, output_dir: Path) -> list[Prediction]:
        shared = self.exemplar_ids & set(table["id"])
        if shared:
            raise MusiqueModelsError(
                f"k-shot exemplars {sorted(shared)} are among the questions to answer: draw them again "
                "(another seed) or predict another table"
            )
        if self.ranker is not None and self.top_k is not None:
            rankings, _ = self.ranker.rank(table)
            table = with_top_k(table, rankings, self.top_k)
        decoded = self.reader.read(table)
        self.extra_metrics = self.reader.finish(output_dir)
        return decoded_predictions(table["id"], decoded)


def fit_generative_stage(
    context: RunContext,
    stage: str,
    stage_cfg: DictConfig,
    train: datasets.Dataset,
    evaluation: datasets.Dataset | None,
    eval_batch_size: int,
    num_workers: int,
) -> FittedGenerativeReader:
    """Fit a generative reader as stage `stage` on `train` (each row's `selected_idxs`, when present, say what it
    reads), validated on `evaluation` when given; its best weights with what feeds them."""
    backbone: BackboneSpec = instantiate(stage_cfg.backbone)
    tokenizer = load_tokenizer(backbone, paragraph_marker=False)
    with_answerability = context.has_unanswerable
    settings = generative_settings(stage_cfg, context.cfg, backbone, with_answerability)
    reader = build_generative_reader(
        stage_cfg, backbone, tokenizer, with_answerability, validation=context.validation_gold()
    )
    inputs = StageInputs(tokenizer, featurize_generative, settings, train, evaluation)
    monitor = reader_monitor(with_answerability, context.eval_paired)
    best = fit_stage(context, stage, reader, stage_cfg, inputs, monitor, eval_batch_size, num_workers)
    return FittedGenerativeReader(best, tokenizer, settings)


def load_generative_stage(cfg: DictConfig, stage_cfg: DictConfig, checkpoint: Path) -> FittedGenerativeReader:
    """The generative reader of a finished stage's best `checkpoint`, with what feeds it under the run's `cfg`."""
    reader = GenerativeReader.load_from_checkpoint(checkpoint, map_location="cpu")
    settings = generative_settings(stage_cfg, cfg, reader.hparams.backbone, reader.with_answerability)
    return FittedGenerativeReader(reader, reader.tokenizer, settings)


class SelectGenerate(SelectAnswer):
    """`model=select_generate`: Select+Answer whose answerer is a `GenerativeReader` (stage settings
    `stage_settings/generative_reader`) reading the selector's top K as one input, in rank order. Everything else
    (the selector, its ranking of the training split, `selector_checkpoint`) is Select+Answer's."""

    def _fit_answerer(
        self,
        context: RunContext,
        stage: str,
        train: datasets.Dataset,
        evaluation: datasets.Dataset | None,
        selector: FittedRanker,
    ) -> FittedGenerativeReader:
        return fit_generative_stage(
            context, stage, self.answerer_cfg, train, evaluation, self.eval_batch_size, self.num_workers
        )

    def _load_answerer(self, cfg: DictConfig, path: Path) -> FittedGenerativeReader:
        return load_generative_stage(cfg, self.answerer_cfg, path)

    @classmethod
    def plan(cls, cfg: DictConfig, splits: PlanSplits) -> list[StagePlan]:
        """The stages of a run: Select+Answer's selector and its rankings, a seq2seq answerer on its top K."""
        return selector_stages(cfg, splits, "", generative_stages(cfg, splits))


class GenerativeReaderRecipe:
    """`model=generative_reader`: one stage, `reader` (settings `stage_settings/generative_reader`): a generative
    reader over all the paragraphs of each question, in dataset order; those past `max_source_tokens` are not
    read."""

    def __init__(
        self, reader: DictConfig, eval_batch_size: int = 8, num_workers: int = 0, name: str = "generative_reader"
    ) -> None:
        self.name = name
        self.reader_cfg = reader
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers

    def fit(self, context: RunContext) -> GenerativePredictor:
        fitted = fit_generative_stage(
            context,
            READER_STAGE,
            self.reader_cfg,
            context.train,
            context.evaluation,
            self.eval_batch_size,
            self.num_workers,
        )
        return GenerativePredictor(fitted, context.cfg, self.eval_batch_size)

    def load(self, cfg: DictConfig, run_dir: Path) -> GenerativePredictor:
        fitted = load_generative_stage(cfg, self.reader_cfg, finished_checkpoint(run_dir, READER_STAGE))
        return GenerativePredictor(fitted, cfg, self.eval_batch_size)


class PromptedLLM:
    """`model=llm_prompt`: a decoder-only LLM prompted with no training (see the module docstring). `reader`: the
    backbone and the token caps (`stage_settings/generative_reader`; its optimisation settings are unused).
    `shots`: k-shot exemplars drawn from the training split with the run's seed (none of them a question being
    answered), each with its supporting paragraphs and `exemplar_distractors` others. `selector_checkpoint` and
    `top_k`: read a trained selector's top K instead of every paragraph (its pairs clipped to
    `selector_max_length` tokens, as the selector was trained). `engine`: `hf` (transformers'
    `generate`) or `vllm`."""

    def __init__(
        self,
        reader: DictConfig,
        shots: int = 0,
        exemplar_distractors: int = 2,
        selector_checkpoint: str | None = None,
        top_k: int = 5,
        selector_max_length: int = 300,
        engine: str = "hf",
        eval_batch_size: int = 8,
        name: str = "llm_prompt",
    ) -> None:
        backbone: BackboneSpec = instantiate(reader.backbone)
        if not backbone.causal:
            raise MusiqueModelsError(
                f"model=llm_prompt prompts a decoder-only model; backbone {backbone.name!r} is not one "
                "(backbone@model.reader.backbone=smollm2_135m_instruct, offline; smollm2_360m_instruct, "
                "qwen2_5_1_5b_instruct, ...; tiny_llama, random, for tests)"
            )
        require_engine(engine, backbone, bool(reader.get("guided_format", False)))
        if shots < 0:
            raise MusiqueModelsError(f"model.shots={shots}: the number of exemplars is 0 (zero-shot) or more")
        self.name = name
        self.reader_cfg = reader
        self.shots = shots
        self.exemplar_distractors = exemplar_distractors
        self.selector_checkpoint = selector_checkpoint
        self.top_k = top_k
        self.selector_max_length = selector_max_length
        self.engine = engine
        self.eval_batch_size = eval_batch_size

    def _reader(self, cfg: DictConfig, with_answerability: bool) -> GenerativeReader:
        """The LLM as its config names it (nothing trained)."""
        backbone: BackboneSpec = instantiate(self.reader_cfg.backbone)
        tokenizer = load_tokenizer(backbone, paragraph_marker=False)
        # a random backbone (tests) is drawn from the run's seed, so that `load` rebuilds the very same weights
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(cfg.seed))
            return build_generative_reader(self.reader_cfg, backbone, tokenizer, with_answerability)

    def _predictor(
        self, cfg: DictConfig, exemplars: list[dict], with_answerability: bool, reader: GenerativeReader | None = None
    ) -> GenerativePredictor:
        reader = reader or self._reader(cfg, with_answerability)
        tokenizer = reader.tokenizer
        settings = generative_settings(self.reader_cfg, cfg, reader.hparams.backbone, with_answerability, exemplars)
        fitted = FittedGenerativeReader(reader, tokenizer, settings, self.engine)
        ranker = None
        if self.selector_checkpoint:
            selector = load_selector(self.selector_checkpoint)
            selector_tokenizer = load_tokenizer(selector.hparams.backbone)
            room = selector.hparams.backbone.max_length - selector_tokenizer.num_special_tokens_to_add(pair=False)
            settings_of_selector = {"max_length": min(self.selector_max_length, room)}
            ranker = SelectorRanker(
                FittedSelector(selector, selector_tokenizer, settings_of_selector), cfg, self.eval_batch_size
            )
        return GenerativePredictor(fitted, cfg, self.eval_batch_size, ranker, self.top_k if ranker else None)

    def fit(self, context: RunContext) -> GenerativePredictor:
        """No training: draws the exemplars (written to `prompt_exemplars.json`) and places the model."""
        excluded = set(context.evaluation["id"])
        exemplars = draw_exemplars(
            context.train, self.shots, int(context.cfg.seed), excluded, self.exemplar_distractors
        )
        with_answerability = context.has_unanswerable
        write_json(context.run_dir / EXEMPLARS_FILE, {"with_answerability": with_answerability, "exemplars": exemplars})
        return self._predictor(context.cfg, exemplars, with_answerability)

    def load(self, cfg: DictConfig, run_dir: Path) -> GenerativePredictor:
        """The same prompts as the run in `run_dir` (its exemplars file), to the LLM its config names, or to the one
        its folder holds as stage `reader` (an export's: `untrained_modules`)."""
        setup = self._setup(run_dir)
        saved = finished_stage(Path(run_dir), READER_STAGE)
        reader = None
        if saved is not None:
            reader = GenerativeReader.load_from_checkpoint(saved["best_checkpoint"], map_location="cpu")
        return self._predictor(cfg, setup["exemplars"], bool(setup["with_answerability"]), reader)

    def untrained_modules(self, cfg: DictConfig, run_dir: Path) -> dict[str, GenerativeReader]:
        """What `load` builds from the config rather than reading from a stage (the LLM, as stage `reader`): an
        export saves it, so that the export needs no package or hub."""
        return {READER_STAGE: self._reader(cfg, bool(self._setup(run_dir)["with_answerability"]))}

    @staticmethod
    def _setup(run_dir: Path) -> dict[str, Any]:
        path = Path(run_dir) / EXEMPLARS_FILE
        if not path.exists():
            raise MusiqueModelsError(f"{path}: no exemplars file; the run did not finish its setup")
        return json.loads(path.read_text())
