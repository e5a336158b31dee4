"""Long-context encoders made from short pretrained checkpoints (the Longformer paper's recipe, Beltagy et al. 2020).

`convert_to_longformer` turns a BERT- or RoBERTa-family checkpoint (absolute learned positions, e.g.
all-MiniLM-L6-v2 with 512) into a Longformer with a longer position table:
- the learned position embeddings are copied repeatedly up to the new length (the paper's initialisation: a
  model that has learned local position patterns keeps them in every block of 512);
- the global-attention projections (`query_global`, `key_global`, `value_global`) start as copies of the local
  ones, so that a token given global attention first attends the way it did before;
- every layer attends within a sliding window of `attention_window` tokens (window / 2 on each side).
Every other weight is copied unchanged. The result is a normal HF folder (`config.json`, `model.safetensors`,
the tokenizer) that `AutoModel.from_pretrained` loads as a `LongformerModel`.

On an input no longer than window / 2 tokens every token's window covers the whole input, so the converted model
computes the same function as the source model: `tests/models/test_long_context.py` checks that.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer, LongformerConfig, LongformerModel

from musique_models.errors import MusiqueModelsError
from musique_models.io import atomic_folder, code_fingerprint

log = logging.getLogger(__name__)

# Source architectures whose layers carry the weight names Longformer's layers use (BERT's layout).
SUPPORTED_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "camembert")


class ConversionError(MusiqueModelsError):
    """A checkpoint cannot be converted into a Longformer."""


def position_offset(model_type: str, pad_token_id: int) -> int:
    """Index of the first real position in the position table: RoBERTa-family tables begin after the padding
    index (positions pad_id + 1, pad_id + 2, ...); BERT's begin at 0."""
    return pad_token_id + 1 if model_type != "bert" else 0


def extend_positions(
    source_table: torch.Tensor, source_offset: int, max_positions: int, pad_token_id: int
) -> torch.Tensor:
    """The Longformer position table: row `pad_token_id + 1 + i` is the source's learned position `i mod n`
    (n = the source's number of learned positions), for i < `max_positions`; rows up to the padding index are
    copied from the source's own rows where it has them (RoBERTa) or left at zero (BERT has none).

    Shapes: source_table (source_rows, H) -> (pad_token_id + 1 + max_positions, H).
    """
    learned = source_table[source_offset:]  # (n, H)
    offset = pad_token_id + 1
    table = source_table.new_zeros(offset + max_positions, source_table.shape[1])
    if source_offset:
        table[:source_offset] = source_table[:source_offset]
    for start in range(0, max_positions, len(learned)):
        block = min(len(learned), max_positions - start)
        table[offset + start : offset + start + block] = learned[:block]
    return table


def convert_to_longformer(
    source: str | Path, output_dir: str | Path, max_positions: int = 4096, attention_window: int = 512
) -> Path:
    """Convert the checkpoint folder `source` into a Longformer folder at `output_dir` (see the module docstring).

    `max_positions` is the longest input (in tokens) the new model reads; `attention_window` (even) the size of
    each token's local window. Written to a temporary folder and renamed, so `output_dir` is never half-written.
    """
    if attention_window <= 0 or attention_window % 2:
        raise ConversionError(f"attention_window must be a positive even number, got {attention_window}")
    source_model = AutoModel.from_pretrained(str(source))
    source_config = source_model.config
    if source_config.model_type not in SUPPORTED_MODEL_TYPES:
        raise ConversionError(
            f"{source}: model type {source_config.model_type!r} cannot be converted "
            f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    if getattr(source_config, "position_embedding_type", "absolute") != "absolute":
        raise ConversionError(f"{source}: only learned absolute position embeddings can be extended")
    pad_token_id = source_config.pad_token_id if source_config.pad_token_id is not None else 0
    config = LongformerConfig(
        vocab_size=source_config.vocab_size,
        hidden_size=source_config.hidden_size,
        num_hidden_layers=source_config.num_hidden_layers,
        num_attention_heads=source_config.num_attention_heads,
        intermediate_size=source_config.intermediate_size,
        hidden_act=source_config.hidden_act,
        hidden_dropout_prob=source_config.hidden_dropout_prob,
        attention_probs_dropout_prob=source_config.attention_probs_dropout_prob,
        type_vocab_size=source_config.type_vocab_size,
        initializer_range=source_config.initializer_range,
        layer_norm_eps=source_config.layer_norm_eps,
        pad_token_id=pad_token_id,
        bos_token_id=source_config.bos_token_id,
        eos_token_id=source_config.eos_token_id,
        sep_token_id=getattr(source_config, "sep_token_id", None),
        max_position_embeddings=pad_token_id + 1 + max_positions,
        attention_window=[attention_window] * source_config.num_hidden_layers,
    )
    has_pooler = getattr(source_model, "pooler", None) is not None
    target = LongformerModel(config, add_pooling_layer=has_pooler)
    target.load_state_dict(_longformer_state(source_model, pad_token_id, max_positions), strict=True)

    with atomic_folder(output_dir) as staging:
        target.save_pretrained(staging)
        tokenizer = AutoTokenizer.from_pretrained(str(source), use_fast=True)
        tokenizer.model_max_length = max_positions
        tokenizer.save_pretrained(staging)
        (staging / "conversion.json").write_text(
            json.dumps(
                {
                    "source": str(source),
                    "source_model_type": source_config.model_type,
                    "source_positions": source_config.max_position_embeddings,
                    "max_positions": max_positions,
                    "attention_window": attention_window,
                    "code": code_fingerprint(__name__),
                },
                indent=2,
            )
        )
    output_dir = Path(output_dir)
    log.info("converted %s into a %d-position Longformer at %s", source, max_positions, output_dir)
    return output_dir


def _longformer_state(source_model: torch.nn.Module, pad_token_id: int, max_positions: int) -> dict[str, torch.Tensor]:
    """The Longformer state dict from a BERT-layout model: names kept, positions extended, global projections
    copied from the local ones."""
    state = {
        name: tensor.detach().clone()
        for name, tensor in source_model.state_dict().items()
        if not name.endswith("position_ids") and not name.endswith("token_type_ids")
    }  # registered buffers Longformer rebuilds itself
    key = "embeddings.position_embeddings.weight"
    state[key] = extend_positions(
        state[key], position_offset(source_model.config.model_type, pad_token_id), max_positions, pad_token_id
    )
    for name in list(state):
        for projection in ("query", "key", "value"):
            marker = f".attention.self.{projection}."
            if marker in name:
                state[name.replace(marker, f".attention.self.{projection}_global.")] = state[name].clone()
    return state


def ensure_converted(source: str | Path, output_dir: str | Path, max_positions: int, attention_window: int) -> Path:
    """`output_dir` holding `source` converted with these settings: built on first use, reused afterwards (and
    rebuilt when the settings, the source or the converter changed)."""
    output_dir = Path(output_dir)
    wanted = {
        "source": str(source),
        "max_positions": max_positions,
        "attention_window": attention_window,
        "code": code_fingerprint(__name__),
    }
    record = output_dir / "conversion.json"
    if record.exists():
        found = json.loads(record.read_text())
        if all(found.get(key) == value for key, value in wanted.items()):
            return output_dir
    return convert_to_longformer(source, output_dir, max_positions, attention_window)
