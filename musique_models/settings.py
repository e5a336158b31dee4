"""Each training stage's settings as a typed schema, registered with Hydra's ConfigStore as `stage_settings/<name>`.

A model config takes its stages' schemas in its defaults list (`- /stage_settings/selector@selector`), so every key
a stage reads has its type and default HERE, in one place; the yaml sets only what it changes (interpolations of
the dataset's facts, sample-size settings). An unknown or misspelled key of a stage is refused before any work:
by Hydra when the config composes, or, given with `+` (which Hydra accepts even on a typed node), by `train.py`
(`unknown_settings`); either way in one line that names the key and the valid keys.

    python train.py model.answerer.lrr=1e-4
    error: model.answerer.lrr: AnswererSettings has no such setting (its settings: accumulate_grad_batches, ...)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

from hydra.core.config_store import ConfigStore

# `Optional[...]`, not `X | None`: OmegaConf 2.3 reads only the former as an optional typed field.


@dataclass
class StageSettings:
    """What every training stage reads: its backbone (a `conf/backbone` entry, instantiated by the recipe), the
    optimisation (AdamW at `lr`, `schedule` with `warmup_ratio`), batches (`micro_batch_size` rows a step times
    `accumulate_grad_batches`), epochs (`batches_per_epoch`: epochs of that many optimizer steps), clipping (the
    trainer's unless set), validation (`validate`, every `check_val_every_n_epoch` epochs) and early stopping
    (`patience` validations without improvement; null: the early-stopping callback's own patience)."""

    backbone: Any = None
    lr: Any = "${.backbone.learning_rate}"  # the backbone's rate (2e-5 for large encoders) unless set
    schedule: str = "linear"
    warmup_ratio: float = 0.1
    micro_batch_size: int = 8
    accumulate_grad_batches: int = 1
    max_epochs: int = 3
    batches_per_epoch: Optional[int] = None  # noqa: UP045 (see above)
    gradient_clip_algorithm: Optional[str] = None  # noqa: UP045
    gradient_clip_val: Optional[float] = None  # noqa: UP045
    patience: Optional[int] = 3  # noqa: UP045
    validate: bool = True
    check_val_every_n_epoch: int = 1


@dataclass
class SelectorSettings(StageSettings):
    """The paragraph selector: `question SEP paragraph` texts of at most `max_length` tokens; a batch is
    `micro_batch_size` QUESTIONS with their gold paragraphs and as many negatives; `rows_per_forward` splits a
    batch's forward pass into length-sorted chunks (same gradient, less padding; null: one pass)."""

    max_length: int = 300
    rows_per_forward: Optional[int] = None  # noqa: UP045


@dataclass
class SingleInputSettings(StageSettings):
    """A reader of all its paragraphs as ONE input (End2End; a Longformer answerer): the question, each paragraph
    and the whole input clipped to their token caps, global attention `before_context` (official) or on the
    `question`, spans of at most `max_answer_tokens` decoded (null: no cap)."""

    max_question_tokens: int = 150
    max_paragraph_tokens: int = 250
    max_document_tokens: int = 4000
    global_attention: str = "before_context"
    gradient_checkpointing: bool = True
    max_answer_tokens: Optional[int] = None  # noqa: UP045


@dataclass
class ReaderSettings(SingleInputSettings):
    """The End2End reader; `single_support`: exactly one supporting paragraph (softmax over the markers)."""

    single_support: bool = False


@dataclass
class AnswererSettings(SingleInputSettings):
    """Select+Answer's answerer over the selector's top K: as one input (`input: single`, or `auto` with a backbone
    of more than 512 positions) or through windows of `max_length` tokens overlapping by `stride` (`windows`)."""

    input: str = "auto"
    max_paragraph_tokens: int = 400
    max_length: int = 512
    stride: int = 128


@dataclass
class GenerationSettings(StageSettings):
    """A seq2seq stage: cross-entropy with `label_smoothing`, beam search of `num_beams` (1: greedy)."""

    label_smoothing: float = 0.1
    num_beams: int = 1


@dataclass
class QuestionOnlySettings(GenerationSettings):
    """The Q-only answerer: the question clipped to `max_question_tokens`, answers of `max_answer_tokens`."""

    max_question_tokens: int = 100
    max_answer_tokens: int = 30


@dataclass
class DecomposerSettings(GenerationSettings):
    """The decomposer: questions of `max_source_tokens`, decompositions of `max_target_tokens`."""

    max_source_tokens: int = 100
    max_target_tokens: int = 100
    num_beams: int = 10


@dataclass
class GenerativeReaderSettings(GenerationSettings):
    """A generative reader (seq2seq or decoder-only, by its backbone): the question clipped to
    `max_question_tokens`, each paragraph to `max_paragraph_tokens`, the whole input (prompt) to
    `max_source_tokens`, the generated target to `max_target_tokens`; gradients clipped by norm; `finetune`: `full` or `lora` (`lora_r`,
    `lora_alpha`, `lora_dropout` on `lora_target_modules`: `all-linear` or module names; `lora_modules_to_save`:
    modules trained whole beside the adapters, e.g. `[lm_head]`); `guided_format`: a decoder-only reader's decoding is
    held to the target format, the model filling its fields (`musique_models.models.guided`)."""

    max_question_tokens: int = 100
    max_paragraph_tokens: int = 200
    max_source_tokens: int = 1024
    max_target_tokens: int = 64
    label_smoothing: float = 0.0
    # by norm, as seq2seq and LLM fine-tuning do (the trainer's default, by value, as AllenNLP: the MiniLM BERT2BERT
    # reader then never learned to read its input in the overfit check, docs/benchmarks/memorisation.md)
    gradient_clip_algorithm: Optional[str] = "norm"  # noqa: UP045
    finetune: str = "full"
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: Any = "all-linear"
    lora_modules_to_save: Any = None
    guided_format: bool = False


@dataclass
class BeamRetrieverSettings(StageSettings):
    """Beam Retrieval (models/beam_retriever.py): `beam_size` chains kept per hop; hop inputs of at most
    `max_length` tokens; `label_order`: the gold chain is ordered (MuSiQue's decomposition); a batch is
    `micro_batch_size` QUESTIONS; `rows_per_forward` splits a hop's candidates into length-sorted forward passes;
    `gradient_checkpointing` recomputes the encoder's activations in the backward pass (a question's hops hold
    20 to 130 inputs). Gradients clipped by norm at 2.0, as the authors' `max_grad_norm`."""

    beam_size: int = 2
    max_length: int = 512
    label_order: bool = False
    gradient_checkpointing: bool = False
    rows_per_forward: Optional[int] = None  # noqa: UP045
    gradient_clip_algorithm: Optional[str] = "norm"  # noqa: UP045
    gradient_clip_val: Optional[float] = 2.0  # noqa: UP045


STAGE_SETTINGS: dict[str, type[StageSettings]] = {
    "selector": SelectorSettings,
    "beam_retriever": BeamRetrieverSettings,
    "reader": ReaderSettings,
    "answerer": AnswererSettings,
    "q_only_answerer": QuestionOnlySettings,
    "decomposer": DecomposerSettings,
    "generative_reader": GenerativeReaderSettings,
}


def setting_names(schema: type[StageSettings]) -> list[str]:
    """The settings of a stage schema, sorted."""
    return sorted(item.name for item in fields(schema))


def register_stage_settings() -> None:
    """Register every stage schema as `stage_settings/<name>` (idempotent)."""
    store = ConfigStore.instance()
    for name, schema in STAGE_SETTINGS.items():
        store.store(group="stage_settings", name=name, node=schema)


def unknown_settings(node: Any, prefix: str) -> list[tuple[str, type[StageSettings]]]:
    """(key, schema) of every key of a composed config's stage nodes (typed by a `StageSettings` schema), at any
    depth under `node` (`prefix`: its own key), that its schema does not have: keys added with `+`, which Hydra
    accepts even on a typed node."""
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(node, DictConfig):
        return []
    schema = OmegaConf.get_type(node)
    if isinstance(schema, type) and issubclass(schema, StageSettings):
        known = set(setting_names(schema))
        return [(f"{prefix}.{key}", schema) for key in node if key not in known]
    found = []
    for key, value in node.items_ex(resolve=False):
        found += unknown_settings(value, f"{prefix}.{key}")
    return found
