"""The generative reader module: its loss is on the target tokens alone, batched generation (left-padded prompts for a
decoder-only model) gives what generating one question at a time gives, the confidence is the generated sequence's
probability, and LoRA trains the adapters alone."""

from __future__ import annotations

import copy

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from musique_models import PROJECT_ROOT
from musique_models.features.generative import featurize_generative
from musique_models.models.backbone import load_tokenizer
from musique_models.models.generative_reader import GenerativeReader, left_padded
from musique_models.training.loaders import PaddingCollator


def _backbone(name: str):
    return instantiate(OmegaConf.load(PROJECT_ROOT / "conf" / "backbone" / f"{name}.yaml"))


def _rows(count: int) -> dict[str, list]:
    rows = []
    for number in range(count):
        paragraphs = [
            {
                "idx": idx,
                "title": f"T{idx}",
                "text": " ".join(["word"] * (3 + 4 * number + idx)),
                "is_supporting": idx == 1,
            }
            for idx in range(3)
        ]
        question = "which " + " ".join(["thing"] * (1 + 3 * number)) + "?"
        rows.append({"question": question, "answer": f"answer {number}", "answerable": True, "paragraphs": paragraphs})
    return {key: [row[key] for row in rows] for key in rows[0]}


def _features(tokenizer, causal: bool, count: int = 4) -> list[dict]:
    columns = featurize_generative(
        _rows(count),
        list(range(count)),
        tokenizer,
        causal=causal,
        max_question_tokens=40,
        max_paragraph_tokens=30,
        max_source_tokens=300,
        max_target_tokens=12,
        include_title=True,
        with_answerability=False,
    )
    return [{key: columns[key][row] for key in columns} for row in range(count)]


@pytest.fixture(scope="module", params=["tiny_llama", "tiny_t5"])
def reader(request):
    backbone = _backbone(request.param)
    tokenizer = load_tokenizer(backbone, paragraph_marker=False)
    torch.manual_seed(0)
    module = GenerativeReader(backbone, len(tokenizer), tokenizer.pad_token_id, max_target_tokens=12).eval()
    return module, tokenizer, PaddingCollator(tokenizer.pad_token_id)


def test_left_padding_moves_each_prompt_to_the_right_edge() -> None:
    ids = torch.tensor([[1, 2, 3, 9, 9], [4, 5, 9, 9, 0]])
    prompts, mask = left_padded(ids, torch.tensor([3, 2]), pad_token_id=0)
    assert prompts.tolist() == [[1, 2, 3], [0, 4, 5]] and mask.tolist() == [[1, 1, 1], [0, 1, 1]]


def test_the_loss_is_the_cross_entropy_of_the_target_tokens_alone(reader) -> None:
    module, tokenizer, collate = reader
    batch = collate(_features(tokenizer, module.causal))
    with torch.no_grad():
        loss = module.loss(batch)
        if module.causal:
            logits = module.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            log_probs = logits[:, :-1].log_softmax(-1)
            targets = batch["labels"][:, 1:]
        else:
            decoder_inputs = batch["labels"][:, :-1].clamp(min=0)
            logits = module.model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=decoder_inputs
            ).logits
            log_probs, targets = logits.log_softmax(-1), batch["labels"][:, 1:]
        counted = targets != -100
        expected = -log_probs.gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)[counted].mean()
    if module.causal:
        assert counted.sum() < targets.numel() / 2  # a decoder-only reader's prompt is not counted
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)


def test_batched_generation_is_what_one_question_at_a_time_generates(reader) -> None:
    module, tokenizer, collate = reader
    rows = _features(tokenizer, module.causal)
    assert len({len(row["input_ids"]) for row in rows}) == len(rows)  # prompts of different lengths: padding matters
    with torch.no_grad():
        batched = module.generate(collate(rows))
        alone = [module.generate(collate([row])) for row in rows]
    for position, single in enumerate(alone):
        assert module.texts(batched["ids"][position : position + 1]) == module.texts(single["ids"])
        assert float(batched["confidence"][position]) == pytest.approx(float(single["confidence"][0]), rel=1e-3)


def test_the_confidence_is_the_probability_of_the_generated_sequence(reader) -> None:
    module, tokenizer, collate = reader
    row = _features(tokenizer, module.causal, 1)[0]
    with torch.no_grad():
        generated = module.generate(collate([row]))
        ids = generated["ids"][0].tolist()
        end = module.end_token_id
        ids = ids[: ids.index(end) + 1] if end in ids else ids
        prompt = row["input_ids"][: row["prompt_length"]] if module.causal else row["input_ids"]
        if module.causal:
            sequence = torch.tensor([prompt + ids])
            log_probs = module.model(input_ids=sequence).logits[0, len(prompt) - 1 : -1].log_softmax(-1)
        else:
            start = module.model.generation_config.decoder_start_token_id
            decoder = torch.tensor([[start, *ids[:-1]]])
            log_probs = (
                module.model(input_ids=torch.tensor([prompt]), decoder_input_ids=decoder).logits[0].log_softmax(-1)
            )
        summed = log_probs.gather(-1, torch.tensor(ids)[:, None]).sum()
    assert float(generated["confidence"][0]) == pytest.approx(float(summed.exp()), rel=1e-3)


def test_lora_trains_the_adapters_alone_and_a_checkpoint_restores_them() -> None:
    backbone = _backbone("tiny_llama")
    tokenizer = load_tokenizer(backbone, paragraph_marker=False)
    module = GenerativeReader(backbone, len(tokenizer), tokenizer.pad_token_id, finetune="lora", lora_r=4)
    trainable = {name for name, parameter in module.named_parameters() if parameter.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    assert sum(p.numel() for p in module.parameters() if p.requires_grad) < 0.2 * sum(
        p.numel() for p in module.parameters()
    )
    with_head = GenerativeReader(
        backbone, len(tokenizer), tokenizer.pad_token_id, finetune="lora", lora_r=4, lora_modules_to_save=["lm_head"]
    )
    assert any("lm_head" in name for name, p in with_head.named_parameters() if p.requires_grad)
    # a trained adapter changes the output; the state dict brings it back into a fresh module
    batch = PaddingCollator(tokenizer.pad_token_id)(_features(tokenizer, True, 2))
    torch.manual_seed(1)
    for name, parameter in module.named_parameters():
        if "lora_B" in name:
            parameter.data.normal_()
    fresh = GenerativeReader(**module.hparams).eval()
    module.eval()
    with torch.no_grad():
        before = fresh.loss(batch)
        fresh.load_state_dict(copy.deepcopy(module.state_dict()))
        assert float(fresh.loss(batch)) == pytest.approx(float(module.loss(batch)))
        assert float(fresh.loss(batch)) != pytest.approx(float(before))
