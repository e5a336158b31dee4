"""Decoding held to the target format (`musique_models.models.guided`): every guided generation of a random model
parses, with a support of paragraph numbers and, with answerability, a yes or no; the caps hold; forced labels keep
their own scores; and the same random model unguided writes nothing the parser reads."""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from transformers import LogitsProcessorList

from musique_models import PROJECT_ROOT
from musique_models.features.context import end_token_id
from musique_models.features.generative import parse_generation
from musique_models.models.backbone import load_causal_lm, load_tokenizer
from musique_models.models.decoding import decode_answers
from musique_models.models.guided import TargetFormatGuide


@pytest.fixture(scope="module")
def tiny():
    spec = instantiate(OmegaConf.load(PROJECT_ROOT / "conf" / "backbone" / "tiny_llama.yaml"))
    tokenizer = load_tokenizer(spec, paragraph_marker=False)
    torch.manual_seed(0)
    return tokenizer, load_causal_lm(spec, len(tokenizer), tokenizer).eval()


def _generate(tiny, seed: int, guide: TargetFormatGuide | None, beams: int = 1, rows: int = 6) -> list[str]:
    """Greedy (or beam) generations of the tiny random model from `rows` random 12-token prompts."""
    tokenizer, model = tiny
    generator = torch.Generator().manual_seed(seed)
    prompts = torch.randint(1000, 20000, (rows, 12), generator=generator)
    processors = LogitsProcessorList([guide]) if guide else None
    with torch.no_grad():
        output = model.generate(
            input_ids=prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=40,
            do_sample=False,
            num_beams=beams,
            logits_processor=processors,
        )
    return decode_answers(tokenizer, output[:, prompts.shape[1] :])


@pytest.mark.parametrize(("seed", "with_answerability"), [(0, False), (1, True), (2, True)])
def test_every_guided_generation_parses_with_paragraph_numbers(tiny, seed: int, with_answerability: bool) -> None:
    tokenizer, _ = tiny
    guide = TargetFormatGuide(tokenizer, end_token_id(tokenizer), 12, with_answerability, max_answer_tokens=6)
    texts = _generate(tiny, seed, guide)
    for text in texts:
        parsed = parse_generation(text, None, with_answerability)
        assert parsed.parsed, (text, parsed.problems)
        assert parsed.support, text  # at least one paragraph number (min_support_tokens=1)
        answer = text.split("|")[0].split(":", 1)[1]
        assert len(tokenizer(answer, add_special_tokens=False)["input_ids"]) <= 6  # max_answer_tokens
        if with_answerability:
            assert text.rstrip().split(":")[-1].strip() in ("yes", "no")
        else:
            assert "answerable" not in text


@pytest.mark.parametrize("seed", [1])
def test_the_support_names_only_the_paragraphs_the_row_read(tiny, seed: int) -> None:
    tokenizer, _ = tiny
    guide = TargetFormatGuide(tokenizer, end_token_id(tokenizer), 12, False, max_answer_tokens=4)
    valid = [{"3", "12"}, {"0", "1", "2"}, {"17"}, {"3", "12"}, {"5"}, {"10", "11"}]
    guide.valid_idxs = valid
    for text, idxs in zip(_generate(tiny, seed, guide), valid, strict=True):
        parsed = parse_generation(text, {int(idx) for idx in idxs})
        assert parsed.parsed and parsed.support and {str(idx) for idx in parsed.support} <= idxs, text
    # unrestricted, the same random model names numbers no question has
    guide.valid_idxs = None
    named = [parse_generation(text).support for text in _generate(tiny, seed, guide)]
    assert any(idx > 20 for support in named for idx in support)


def test_beam_search_is_guided_too(tiny) -> None:
    tokenizer, _ = tiny
    guide = TargetFormatGuide(tokenizer, end_token_id(tokenizer), 12, True, max_answer_tokens=4)
    assert all(parse_generation(text, None, True).parsed for text in _generate(tiny, 3, guide, beams=3, rows=3))


def test_unguided_the_same_model_writes_nothing_the_parser_reads(tiny) -> None:
    assert not any(parse_generation(text).parsed for text in _generate(tiny, 0, None))


def test_a_forced_label_keeps_its_own_score_and_rules_out_every_other_id(tiny) -> None:
    tokenizer, _ = tiny
    guide = TargetFormatGuide(tokenizer, end_token_id(tokenizer), 2, False)
    scores = torch.randn(2, len(tokenizer))
    prompts = torch.tensor([[5, 6], [7, 8]])
    guided = guide(prompts, scores)
    first = guide.answer_label[0]
    assert torch.equal(guided[:, first], scores[:, first])
    assert torch.isinf(guided).sum(1).tolist() == [len(tokenizer) - 1] * 2
    # inside the answer, the enders' probability goes to the support label's first id, and no ender remains
    answering = torch.tensor([[5, 6, *guide.answer_label, 2000]])
    guided = guide(answering, scores[:1])
    closer = guide.support_label[0]
    assert guided[0, closer] == pytest.approx(torch.logsumexp(scores[0, guide.enders], 0).item())
    others = [token for token in guide.enders.tolist() if token != closer]
    assert torch.isinf(guided[0, others]).all()
