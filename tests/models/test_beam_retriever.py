"""Beam Retrieval's module on a tiny random encoder: the search keeps the best chains hop by hop (exhaustive when the
beam holds every chain), the training loss is the per-hop two-way cross-entropy against the gold prefix, later hops
go untrained once no kept chain is a gold prefix, the chains come back as paragraph idx, the chain metric drops DDP
repeats, and the module learns a small set of chains."""

from __future__ import annotations

import itertools
import random

import pytest
import torch
from hydra.utils import instantiate
from torch import nn

from musique_models.features.beam import hop_budget, hop_input
from musique_models.models.backbone import load_tokenizer
from musique_models.models.beam_retriever import BeamQuestion, BeamRetriever, ChainMetric, is_gold_prefix
from tests.cli.test_score_run import compose_cfg


class NeverSwap(random.Random):
    """A training rng that keeps the chain before the candidate in every input."""

    def random(self) -> float:
        return 1.0


def _retriever(beam_size: int = 2, label_order: bool = True, **kwargs) -> BeamRetriever:
    backbone = instantiate(compose_cfg("train", ["backbone=tiny"]).backbone)
    tokenizer = load_tokenizer(backbone)
    torch.manual_seed(0)
    module = BeamRetriever(
        backbone,
        len(tokenizer),
        tokenizer.cls_token_id,
        tokenizer.sep_token_id,
        tokenizer.pad_token_id,
        beam_size=beam_size,
        max_length=40,
        label_order=label_order,
        **kwargs,
    )
    return module.eval()


def _question(paragraphs: int = 5, gold: list[int] | None = None, hops: int = 2) -> BeamQuestion:
    generator = random.Random(paragraphs)
    candidates = [[generator.randrange(5, 90) for _ in range(generator.randrange(4, 12))] for _ in range(paragraphs)]
    return BeamQuestion([7, 8, 9], candidates, [10 + p for p in range(paragraphs)], gold or [], hops, 0)


def test_is_gold_prefix_in_both_orders() -> None:
    assert is_gold_prefix([2], [2, 0, 3], label_order=True)
    assert not is_gold_prefix([0], [2, 0, 3], label_order=True)
    assert is_gold_prefix([0, 2], [2, 0, 3], label_order=True)  # the first two, in either order
    assert is_gold_prefix([0], [2, 0, 3], label_order=False)
    assert is_gold_prefix([3, 0], [2, 0, 3], label_order=False)
    assert not is_gold_prefix([3, 1], [2, 0, 3], label_order=False)
    assert not is_gold_prefix([2, 2], [2, 0, 3], label_order=False)


def test_a_beam_that_holds_every_chain_finds_the_best_scored_one() -> None:
    module = _retriever(beam_size=10)
    question = _question(paragraphs=4)
    with torch.no_grad():
        chains, loss = module.search(question, hops=2)
        # by hand: hop 1 scores every paragraph, hop 2 every pair (each set once, in the order the beams meet it)
        first = module.score_inputs(
            [hop_input(question.question, [], c, hop_budget(40, 3, 2, 0)) for c in question.candidates], True
        )[:, 1]
        order = first.argsort(descending=True).tolist()
        seen, pairs, texts = set(), [], []
        for a in order:
            prefix = hop_input(question.question, [], question.candidates[a], hop_budget(40, 3, 2, 0))[3:]
            for b in range(4):
                if b != a and frozenset((a, b)) not in seen:
                    seen.add(frozenset((a, b)))
                    pairs.append([a, b])
                    texts.append(hop_input(question.question, prefix, question.candidates[b], hop_budget(40, 3, 2, 1)))
        second = module.score_inputs(texts, False)[:, 1]
    assert loss is None and len(pairs) == 6
    assert [chain.positions for chain in chains] == [pairs[i] for i in second.argsort(descending=True).tolist()]
    assert chains[0].hop_scores == pytest.approx([float(first[pairs[int(second.argmax())][0]]), float(second.max())])


def test_beam_size_bounds_the_kept_chains_and_chains_never_repeat_a_paragraph() -> None:
    for beam_size in (1, 2, 3):
        chains, _ = _retriever(beam_size=beam_size).search(_question(paragraphs=6, hops=3), hops=3)
        assert len(chains) == beam_size
        assert all(len(set(chain.positions)) == 3 == len(chain.hop_scores) for chain in chains)
        scores = [chain.hop_scores[-1] for chain in chains]
        assert scores == sorted(scores, reverse=True)


def test_the_training_loss_is_the_per_hop_cross_entropy_against_the_gold_prefix() -> None:
    module = _retriever(beam_size=2, label_order=True)
    question = _question(paragraphs=4, gold=[2, 0])
    captured: list[torch.Tensor] = []
    original = module.score_inputs

    def recording(texts: list[list[int]], first_hop: bool) -> torch.Tensor:
        logits = original(texts, first_hop)
        if first_hop:  # paragraph 2, the gold chain's first, is kept: the second hop trains
            logits = logits + torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 10.0], [0.0, 0.0]])
        captured.append(logits)
        return logits

    module.score_inputs = recording  # type: ignore[method-assign]
    chains, loss = module.search(question, hops=2, rng=NeverSwap())
    first, second = captured
    expected = nn.functional.cross_entropy(first, torch.tensor([0, 0, 1, 0]))  # hop 1: only the chain's first
    kept = first[:, 1].topk(2).indices.tolist()
    assert kept[0] == 2
    # hop 2: every other paragraph after each kept one, a pair met twice scored once; positive: {2, 0}
    pairs = [(a, b) for a in kept for b in range(4) if b != a and not (a == kept[1] and b == kept[0])]
    labels = torch.tensor([int({a, b} == {2, 0}) for a, b in pairs])
    assert len(second) == len(pairs) == 5 and int(labels.sum()) == 1
    expected = expected + nn.functional.cross_entropy(second, labels)
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    assert chains[0].positions in ([a, b] for a, b in pairs)


def test_later_hops_are_not_trained_once_no_kept_chain_is_a_gold_prefix() -> None:
    module = _retriever(beam_size=1, label_order=True)
    question = _question(paragraphs=5, gold=[3, 1])
    calls: list[bool] = []

    def scores(texts: list[list[int]], first_hop: bool) -> torch.Tensor:
        calls.append(first_hop)
        logits = torch.zeros(len(texts), 2, requires_grad=True)
        return logits + torch.tensor([0.0, 1.0]) * torch.arange(len(texts))[:, None]  # the last paragraph wins

    module.score_inputs = scores  # type: ignore[method-assign]
    _, loss = module.search(question, hops=2, rng=NeverSwap())
    assert calls == [True] and loss is not None  # paragraph 4 kept, not 3: hop 2 skipped
    calls.clear()
    question.gold = [4, 1]
    module.search(question, hops=2, rng=NeverSwap())
    assert calls == [True, False]


def test_predictions_are_paragraph_idx_with_a_score_per_hop_and_few_paragraphs_are_taken_whole(monkeypatch) -> None:
    module = _retriever()
    questions = [_question(paragraphs=5, gold=[1, 3], hops=3), _question(paragraphs=4, hops=2)]
    chains = module.predict_chains(questions)
    assert [len(chain.positions) for chain in chains] == [3, 2] and [len(c.hop_scores) for c in chains] == [3, 2]
    monkeypatch.setattr("musique_models.models.beam_retriever.unpack_questions", lambda batch: questions)
    output = module.predict_step({}, 0)
    assert output["chain"] == [[10 + p for p in chain.positions] for chain in chains]  # idx = 10 + position
    assert output["gold"] == [[11, 13], []] and output["hop_scores"] == [chain.hop_scores for chain in chains]
    chains, _ = module.search(_question(paragraphs=2), hops=2)
    assert chains[0].positions == [0, 1]


def test_the_chain_metric_averages_questions_and_drops_repeats() -> None:
    metric = ChainMetric()
    metric.update(0, [1, 2], [1, 2])
    metric.update(1, [1, 3], [1, 2])
    metric.update(1, [1, 2], [1, 2])  # a DDP repeat of row 1: the first kept
    values = {name: float(value) for name, value in metric.compute().items()}
    assert values == pytest.approx({"chain_f1": 0.75, "chain_em": 0.5, "chain_recall": 0.75})


def test_the_retriever_learns_a_few_chains() -> None:
    torch.manual_seed(0)
    module = _retriever(beam_size=2, label_order=True).train()
    questions = [_question(paragraphs=5, gold=[1, 3]), _question(paragraphs=6, gold=[4, 0])]
    optimizer = torch.optim.AdamW(module.parameters(), lr=3e-3)
    for step in range(40):
        optimizer.zero_grad()
        losses = [module.search(q, 2, random.Random(step))[1] for q in questions]
        torch.stack([loss for loss in losses if loss is not None]).mean().backward()
        optimizer.step()
    module.eval()
    with torch.no_grad():
        assert [chain.positions for chain in module.predict_chains(questions)] == [[1, 3], [4, 0]]


def test_every_chain_of_distinct_paragraphs_is_scored_once_per_set() -> None:
    module = _retriever(beam_size=3)
    question = _question(paragraphs=4, hops=3)
    seen: list[int] = []
    original = module.score_inputs

    def counting(texts: list[list[int]], first_hop: bool) -> torch.Tensor:
        seen.append(len(texts))
        return original(texts, first_hop)

    module.score_inputs = counting  # type: ignore[method-assign]
    module.search(question, hops=3)
    # hop 1: 4 paragraphs; hop 2: 3 beams x 3 others, minus pairs met twice; hop 3: at most C(4, 3) sets
    assert seen[0] == 4 and seen[1] == 6  # C(4, 2): each pair once, though 3 beams x 3 others meet 9
    assert seen[2] <= len(list(itertools.combinations(range(4), 3)))


def test_gradient_checkpointing_gives_the_same_loss_and_gradients() -> None:
    plain, checkpointed = _retriever(), _retriever(gradient_checkpointing=True)
    checkpointed.load_state_dict(plain.state_dict())
    question = _question(paragraphs=5, gold=[1, 3])
    gradients = []
    for module in (plain, checkpointed):
        module.train()
        torch.manual_seed(1)
        _, loss = module.search(question, 2, NeverSwap())
        loss.backward()
        gradients.append((float(loss), module.encoder.embeddings.word_embeddings.weight.grad.clone()))
    assert checkpointed.encoder.is_gradient_checkpointing and not plain.encoder.is_gradient_checkpointing
    assert gradients[0][0] == pytest.approx(gradients[1][0], rel=1e-6)
    assert torch.allclose(gradients[0][1], gradients[1][1], atol=1e-6)
