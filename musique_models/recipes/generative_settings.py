"""The settings of a generative reader (`recipes/generative.py`). Light: imports no torch (`musique_models.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from musique_models.settings import GenerationSettings


@dataclass
class GenerativeReaderSettings(GenerationSettings):
    """A generative reader (seq2seq or decoder-only, by its backbone): the question clipped to
    `max_question_tokens`, each paragraph to `max_paragraph_tokens`, the whole input (prompt) to
    `max_source_tokens`, the generated target to `max_target_tokens`; gradients clipped by norm; `finetune`: `full` or `lora` (`lora_r`,
    `lora_alpha`, `lora_dropout` on `lora_target_modules`: `all-linear` or module names; `lora_modules_to_save`:
    modules trained whole beside the adapters, e.g. `[lm_head]`); `guided_format`: a decoder-only reader's decoding is
    held to the target format, the model filling its fields (`musique_models.models.guided`)."""

    config_name: ClassVar[str] = "generative_reader"

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
