"""Hub backbones without a network (`musique_models.models.hub`): a local folder first, the hub when it answers,
the local Hugging Face cache offline, else one line with the offline backbones of the right kind."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import constants

from musique_models.models import hub
from musique_models.models.hub import BackboneError, hub_folder, offline_backbones


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache, with `org/model`'s snapshot holding only a config (a partial download)."""
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    repo = tmp_path / "hub" / "models--org--model"
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    return repo / "snapshots" / "abc123"


def test_a_local_folder_is_used_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub, "hub_unreachable", lambda endpoint: pytest.fail("no network is asked"))
    assert hub_folder("mine", str(tmp_path)) == str(tmp_path)


def test_online_the_hub_name_is_used_and_transformers_completes_a_partial_cache(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "hub_unreachable", lambda endpoint: None)
    assert hub_folder("model", "org/model") == "org/model"


def test_offline_the_cached_snapshot_is_used(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "hub_unreachable", lambda endpoint: "huggingface.co does not answer")
    assert Path(hub_folder("model", "org/model")) == cache
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert Path(hub_folder("model", "org/model")) == cache


def test_offline_and_not_cached_is_one_line_with_the_backbones_of_its_kind(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(BackboneError) as raised:
        hub_folder("qwen", "Qwen/Qwen2.5-1.5B-Instruct", causal=True, key="model.reader.backbone")
    message = str(raised.value)
    assert "\n" not in message and "HF_HUB_OFFLINE=1 is set" in message
    assert "huggingface-cli download Qwen/Qwen2.5-1.5B-Instruct" in message
    assert "(model.reader.backbone.path=/a/local/copy)" in message  # the override that points it at a copy
    assert message.endswith("offline, use decoder-only: smollm2_135m_instruct, tiny_llama (random weights: tests)")
    encoders = offline_backbones(causal=False)
    assert encoders.startswith("encoder: minilm, minilm_long, ") and "seq2seq: minilm_bert2bert" in encoders
    assert "tiny_llama" not in encoders and "smollm2" not in encoders
