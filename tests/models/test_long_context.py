"""Short checkpoints converted into Longformers: same function on short inputs, 4,096-token inputs, the cache.

Tolerance: on an input no longer than half the attention window every token's sliding window covers the whole
input, so the converted model computes exactly the source's function; only the order of floating-point sums
differs (Longformer multiplies in overlapping chunks and masks with a large negative number instead of the
source's additive mask). Measured differences are ~2e-6 on MiniLM states of magnitude up to ~6; the tests allow
1e-4 absolute, which any real mistake (a position off by one, a missing layer norm, an uncopied projection)
exceeds by orders of magnitude.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from transformers import AutoModel, AutoTokenizer, LongformerModel, RobertaConfig, RobertaModel

from musique_models import PROJECT_ROOT
from musique_models.models import long_context
from musique_models.models.backbone import load_encoder, load_tokenizer
from musique_models.models.long_context import ConversionError, convert_to_longformer, ensure_converted

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def minilm_dir() -> str:
    return instantiate(OmegaConf.load(PROJECT_ROOT / "conf/backbone/minilm.yaml")).model_dir()


@pytest.fixture(scope="module")
def converted(minilm_dir: str, tmp_path_factory) -> Path:
    return convert_to_longformer(minilm_dir, tmp_path_factory.mktemp("long") / "minilm_long", 4096, 512)


def test_converted_minilm_matches_the_source_on_short_inputs(minilm_dir: str, converted: Path) -> None:
    source = AutoModel.from_pretrained(minilm_dir).eval()
    target = AutoModel.from_pretrained(str(converted)).eval()
    assert isinstance(target, LongformerModel) and target.config.attention_window == [512] * 6
    tokenizer = AutoTokenizer.from_pretrained(str(converted))
    batch = tokenizer(
        ["Who founded the company that makes the iPhone?", "Where is it?"],
        ["Apple was founded by Steve Jobs, Steve Wozniak and Ronald Wayne in 1976. " * 4, "Cupertino."],
        padding=True,
        return_tensors="pt",
    )  # a pair (segment ids) and padding
    with torch.no_grad():
        expected = source(**batch).last_hidden_state
        actual = target(**batch).last_hidden_state
        global_question = target(**batch, global_attention_mask=batch["token_type_ids"].eq(0).long()).last_hidden_state
    real = batch["attention_mask"].bool()
    assert torch.allclose(actual[real], expected[real], atol=TOLERANCE)
    # global projections start as copies of the local ones: global attention changes nothing on a short input
    assert torch.allclose(global_question[real], expected[real], atol=TOLERANCE)


def test_positions_repeat_and_global_projections_copy_the_local_ones(minilm_dir: str, converted: Path) -> None:
    source = AutoModel.from_pretrained(minilm_dir).state_dict()
    target = AutoModel.from_pretrained(str(converted)).state_dict()
    learned = source["embeddings.position_embeddings.weight"]  # (512, H), BERT positions start at 0
    table = target["embeddings.position_embeddings.weight"]  # (1 + 4096, H), Longformer's start after pad id 0
    assert table.shape[0] == 1 + 4096
    for position in (0, 1, 511, 512, 1000, 4095):
        assert torch.equal(table[1 + position], learned[position % 512])
    for projection in ("query", "key", "value"):
        local = target[f"encoder.layer.3.attention.self.{projection}.weight"]
        assert torch.equal(target[f"encoder.layer.3.attention.self.{projection}_global.weight"], local)
        assert torch.equal(local, source[f"encoder.layer.3.attention.self.{projection}.weight"])


def test_converted_model_runs_on_4096_tokens(converted: Path) -> None:
    model = AutoModel.from_pretrained(str(converted)).eval()
    ids = torch.randint(1000, 20000, (1, 4096))
    global_attention = torch.zeros_like(ids)
    global_attention[0, :20] = 1
    with torch.no_grad():
        states = model(input_ids=ids, attention_mask=torch.ones_like(ids), global_attention_mask=global_attention)
    assert states.last_hidden_state.shape == (1, 4096, 384)
    assert torch.isfinite(states.last_hidden_state).all()


def test_roberta_family_positions_keep_their_padding_offset(minilm_dir: str, tmp_path: Path) -> None:
    config = RobertaConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=66,
        pad_token_id=1,
    )  # 64 positions
    torch.manual_seed(0)
    RobertaModel(config).save_pretrained(tmp_path / "roberta")
    AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(tmp_path / "roberta")  # any tokenizer will do
    long_dir = convert_to_longformer(tmp_path / "roberta", tmp_path / "long", max_positions=256, attention_window=64)
    source, target = (
        RobertaModel.from_pretrained(tmp_path / "roberta").eval(),
        AutoModel.from_pretrained(long_dir).eval(),
    )
    table = target.embeddings.position_embeddings.weight
    assert table.shape[0] == 2 + 256 and torch.equal(
        table[2 + 64 + 5], source.embeddings.position_embeddings.weight[2 + 5]
    )
    ids = torch.randint(3, 100, (2, 30))
    with torch.no_grad():
        assert torch.allclose(
            target(input_ids=ids).last_hidden_state, source(input_ids=ids).last_hidden_state, atol=TOLERANCE
        )


def test_built_on_first_use_then_reused_and_rebuilt_when_settings_or_code_change(
    minilm_dir: str, tmp_path: Path, monkeypatch
) -> None:
    folder = tmp_path / "cache" / "minilm_long"
    ensure_converted(minilm_dir, folder, 1024, 256)
    weights = folder / "model.safetensors"
    first_write = weights.stat().st_mtime_ns
    assert ensure_converted(minilm_dir, folder, 1024, 256) == folder and weights.stat().st_mtime_ns == first_write
    ensure_converted(minilm_dir, folder, 2048, 256)
    assert json.loads((folder / "conversion.json").read_text())["max_positions"] == 2048
    second_write = weights.stat().st_mtime_ns
    monkeypatch.setattr(long_context, "code_fingerprint", lambda *modules: "an edited converter")
    ensure_converted(minilm_dir, folder, 2048, 256)  # same settings, other converter code: rebuilt
    assert weights.stat().st_mtime_ns != second_write
    assert not [path for path in folder.parent.iterdir() if path.name.startswith(".")]  # no staging folder left
    with pytest.raises(ConversionError, match="even"):
        convert_to_longformer(minilm_dir, tmp_path / "odd", 1024, 255)


def test_minilm_long_backbone_config_builds_offline_into_the_cache(compose_train_cfg, tmp_path: Path) -> None:
    spec = instantiate(compose_train_cfg(["backbone=minilm_long"]).backbone)
    assert spec.source == "converted" and spec.max_length == 4096
    tokenizer = load_tokenizer(spec)  # converts on first use
    assert Path(spec.model_dir()).is_relative_to(tmp_path) and tokenizer.model_max_length == 4096
    encoder = load_encoder(spec, len(tokenizer))
    assert encoder.config.model_type == "longformer" and encoder.config.max_position_embeddings == 4097
