"""Beam Retrieval (Zhang et al., "End-to-End Beam Retrieval for Multi-Hop Question Answering", NAACL 2024): a
cross-encoder that scores paragraph CHAINS hop by hop and keeps the `beam_size` best at each hop.

Hop 1 scores `question + candidate` for every paragraph; hop t scores `question + the chain so far + candidate` for
every kept chain and every paragraph not in it. Each input is `[CLS] tokens [SEP]`, the `[SEP]` left out of the
attention mask as the authors' code leaves it (features/beam.py: `hop_input`, `hop_budget`); a two-way head on the pooled encoder states scores it (`first_hop_head` at hop 1, `next_hop_head`
after, as the authors' `hop_classifier_layer` / `hop_n_classifier_layer`), and the beam keeps the inputs with the
highest positive logit. Training runs the same search over the model's own beams: at each hop, a two-way
cross-entropy over every candidate (mean over the hop's candidates, summed over hops), a candidate being positive
when its chain is the gold chain's prefix; when no kept chain is a gold prefix, the question's later hops are not
trained (no candidate could be positive). The authors' code: github.com/canghongjian/beam_retriever,
`retrieval/retriever_model.py`; where this differs, docs/models.md ("Beam Retrieval") says so.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torchmetrics import Metric

from musique_models.evaluation.metrics import support_scores
from musique_models.evaluation.torchmetric import state_table
from musique_models.features.beam import hop_budget, hop_input
from musique_models.models.backbone import BackboneSpec, load_encoder, pool
from musique_models.models.base import QAModule


@dataclass
class BeamQuestion:
    """One question of a collated batch: token ids of the question and of each paragraph (dataset order), the
    paragraphs' idx, the gold chain (positions in that order; [] when it has none), and the hops to retrieve."""

    question: list[int]
    candidates: list[list[int]]
    idxs: list[int]
    gold: list[int]
    hops: int
    row: int


@dataclass
class Chain:
    """A chain of paragraph positions, the context tokens of its last hop input (after the question), and the
    score of each hop's choice (the positive logit)."""

    positions: list[int] = field(default_factory=list)
    context: list[int] = field(default_factory=list)
    hop_scores: list[float] = field(default_factory=list)


def unpack_questions(batch: dict[str, torch.Tensor]) -> list[BeamQuestion]:
    """The questions of a batch collated by `PaddingCollator` from `featurize_beam` rows."""
    questions = []
    for b in range(len(batch["example_row"])):
        question = batch["input_ids"][b][batch["attention_mask"][b].bool()].tolist()
        idxs = [int(i) for i in batch["candidate_idx"][b].tolist() if i >= 0]
        lengths = batch["candidate_lengths"][b][: len(idxs)].tolist()
        tokens = batch["candidate_tokens"][b].tolist()
        starts = [0, *itertools.accumulate(lengths)][:-1]
        candidates = [tokens[start : start + length] for start, length in zip(starts, lengths)]
        gold = [int(p) for p in batch["gold_chain"][b].tolist() if p >= 0]
        questions.append(
            BeamQuestion(question, candidates, idxs, gold, int(batch["hops"][b]), int(batch["example_row"][b]))
        )
    return questions


def is_gold_prefix(positions: list[int], gold: list[int], label_order: bool) -> bool:
    """Whether a chain is a correct start of the gold chain: its paragraphs are the first len(chain) gold ones
    (`label_order`: decomposition order, MuSiQue), or any of the gold ones (HotpotQA, 2Wiki)."""
    if not positions or len(positions) > len(gold) or len(set(positions)) != len(positions):
        return False
    if label_order:
        return set(positions) == set(gold[: len(positions)])
    return set(positions) <= set(gold)


class BeamRetriever(QAModule):
    """See the module docstring.

    Args:
        backbone: the encoder.
        vocab_size: the tokenizer's size.
        cls_token_id: the tokenizer's start token (`[CLS]`).
        sep_token_id: the tokenizer's end token (`[SEP]`).
        pad_token_id: the tokenizer's padding token.
        beam_size: chains kept at each hop (the authors: 2 on MuSiQue and HotpotQA, 1 on 2Wiki).
        max_length: tokens of a hop input, special tokens included (512).
        label_order: the gold chain is ordered (MuSiQue's decomposition): hop 1's positive is its first
            paragraph alone; otherwise any gold paragraph starts a correct chain.
        rows_per_forward: score a hop's candidates in forward passes of at most this many inputs, sorted by length
            (less padding; memory); None: one pass per hop.
        gradient_checkpointing: recompute the encoder's activations in the backward pass (the authors' setting).
        seed: seed of the training-time order of chain and candidate in each input.
    """

    def __init__(
        self,
        backbone: BackboneSpec,
        vocab_size: int,
        cls_token_id: int,
        sep_token_id: int,
        pad_token_id: int,
        beam_size: int = 2,
        max_length: int = 512,
        label_order: bool = False,
        rows_per_forward: int | None = None,
        gradient_checkpointing: bool = False,
        seed: int = 0,
        lr: float = 1e-5,
        weight_decay: float = 0.0,
        warmup_ratio: float = 0.1,
        schedule: str = "linear",
    ) -> None:
        super().__init__(lr=lr, weight_decay=weight_decay, warmup_ratio=warmup_ratio, schedule=schedule)
        self.save_hyperparameters()
        self.encoder = load_encoder(backbone, vocab_size)
        if gradient_checkpointing:
            self.encoder.gradient_checkpointing_enable()
        hidden = self.encoder.config.hidden_size
        self.first_hop_head = nn.Linear(hidden, 2)
        self.next_hop_head = nn.Linear(hidden, 2)
        self.pooling = backbone.pooling
        self.beam_size = beam_size
        self.max_length = max_length
        self.label_order = label_order
        self.rows_per_forward = rows_per_forward
        self.val_chains = ChainMetric()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, first_hop: bool) -> torch.Tensor:
        """Two-way logits (negative, positive) of each hop input, shape (inputs, 2)."""
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (N, T, H)
        head = self.first_hop_head if first_hop else self.next_hop_head
        return head(pool(hidden, attention_mask, self.pooling))

    def score_inputs(self, texts: list[list[int]], first_hop: bool) -> torch.Tensor:
        """Logits (len(texts), 2) of hop inputs given as text tokens (the special tokens are added here)."""
        hp = self.hparams
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        chunk = self.rows_per_forward or len(texts)
        logits: list[torch.Tensor] = []
        for start in range(0, len(order), chunk):
            rows = [[hp.cls_token_id, *texts[i], hp.sep_token_id] for i in order[start : start + chunk]]
            longest = max(len(row) for row in rows)
            input_ids = torch.full((len(rows), longest), hp.pad_token_id, dtype=torch.long, device=self.device)
            attention_mask = torch.zeros((len(rows), longest), dtype=torch.long, device=self.device)
            for i, row in enumerate(rows):
                input_ids[i, : len(row)] = torch.tensor(row, device=self.device)
                attention_mask[i, : len(row) - 1] = 1  # the final [SEP] is not attended, as the authors' mask
            logits.append(self(input_ids, attention_mask, first_hop))
        inverse = torch.tensor(sorted(range(len(order)), key=order.__getitem__), device=self.device)
        return torch.cat(logits)[inverse]

    def search(
        self, question: BeamQuestion, hops: int, rng: random.Random | None = None
    ) -> tuple[list[Chain], torch.Tensor | None]:
        """Beam search for a `hops`-paragraph chain: the kept chains, best first, and, when `rng` is given
        (training: it shuffles chain and candidate in each input), the summed per-hop loss against the gold chain
        (None when no hop could be trained)."""
        count = len(question.candidates)
        if count <= hops:  # nothing to choose: every paragraph, in dataset order
            return [Chain(list(range(count)), [], [float("nan")] * count)], None
        beams = [Chain()]
        loss: torch.Tensor | None = None
        for hop in range(hops):
            if (
                rng is not None
                and hop > 0
                and not any(is_gold_prefix(beam.positions, question.gold, self.label_order) for beam in beams)
            ):
                break  # no kept chain can be completed correctly: nothing left to learn on this question
            budget = hop_budget(self.max_length, len(question.question), hops, hop)
            expansions: list[tuple[Chain, int]] = []
            texts: list[list[int]] = []
            seen: set[frozenset[int]] = set()
            for beam in beams:
                for position in range(count):
                    chain = frozenset([*beam.positions, position])
                    if position in beam.positions or chain in seen:
                        continue  # a chain of the same paragraphs in another order is scored once
                    seen.add(chain)
                    swap = rng is not None and hop > 0 and rng.random() < 0.5
                    texts.append(
                        hop_input(question.question, beam.context, question.candidates[position], budget, swap)
                    )
                    expansions.append((beam, position))
            logits = self.score_inputs(texts, first_hop=hop == 0)  # (candidates, 2)
            if rng is not None:
                labels = torch.tensor(
                    [
                        int(is_gold_prefix([*beam.positions, position], question.gold, self.label_order))
                        for beam, position in expansions
                    ],
                    device=self.device,
                )
                hop_loss = nn.functional.cross_entropy(logits.float(), labels)
                loss = hop_loss if loss is None else loss + hop_loss
            scores = logits[:, 1].detach().float()
            kept = scores.topk(min(self.beam_size, len(expansions))).indices.tolist()
            question_length = len(question.question)
            beams = [
                Chain(
                    [*expansions[i][0].positions, expansions[i][1]],
                    texts[i][question_length:],
                    [*expansions[i][0].hop_scores, float(scores[i])],
                )
                for i in kept
            ]
        return beams, loss

    def predict_chains(self, questions: list[BeamQuestion]) -> list[Chain]:
        """The best chain of each question, `hops` paragraphs long (positions in its paragraph order)."""
        return [self.search(question, question.hops)[0][0] for question in questions]

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        losses = []
        for question in unpack_questions(batch):
            if not question.gold:
                continue  # no complete gold chain (an unanswerable question): nothing to train on
            rng = random.Random(hash((self.hparams.seed, self.global_step, question.row)))
            _, loss = self.search(question, len(question.gold), rng)
            if loss is not None:
                losses.append(loss)
        if not losses:  # every question skipped: a zero loss over every weight keeps DDP's ranks in step
            return sum(parameter.sum() for parameter in self.parameters()) * 0.0
        # a batch whose chains all stopped after hop 1 leaves `next_hop_head` out of the graph, which DDP refuses
        loss = torch.stack(losses).mean() + 0.0 * sum(p.sum() for p in self.next_hop_head.parameters())
        self.log("train/loss", loss, prog_bar=True, batch_size=len(losses))
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        questions = unpack_questions(batch)
        for question, chain in zip(questions, self.predict_chains(questions), strict=True):
            if question.gold:
                self.val_chains.update(question.row, chain.positions, question.gold)

    def on_validation_epoch_end(self) -> None:
        metrics = self.val_chains.compute()  # gathered from every rank: identical on all of them
        self.val_chains.reset()
        for name, value in metrics.items():
            self.log(f"val/{name}", value, prog_bar=name == "chain_f1", sync_dist=True)

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, Any]:
        """Per question: its row, its chain as paragraph idx (in chain order), each hop's score, its gold chain
        as idx ([] when it has none)."""
        questions = unpack_questions(batch)
        chains = self.predict_chains(questions)
        return {
            "example_row": [question.row for question in questions],
            "chain": [[q.idxs[p] for p in chain.positions] for q, chain in zip(questions, chains, strict=True)],
            "hop_scores": [chain.hop_scores for chain in chains],
            "gold": [[q.idxs[p] for p in q.gold] for q in questions],
        }


class ChainMetric(Metric):
    """Support F1, exact chain match (as sets) and recall of the gold paragraphs of predicted chains; DDP-safe (rows
    gathered, repeats dropped), averaged over questions."""

    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("rows", default=[], dist_reduce_fx="cat")  # (n, 4): row, f1, exact, recall

    def update(self, row: int, chain: list[int], gold: list[int]) -> None:
        scores = support_scores(chain, gold)
        exact = float(set(chain) == set(gold))
        recall = len(set(chain) & set(gold)) / len(set(gold))
        self.rows.append(torch.tensor([[float(row), scores.f1, exact, recall]], dtype=torch.float64))

    def compute(self) -> dict[str, torch.Tensor]:
        unique: dict[int, list[float]] = {}
        for row, f1, exact, recall in state_table(self.rows, 4).tolist():
            unique.setdefault(int(row), [f1, exact, recall])
        values = torch.tensor(list(unique.values()), dtype=torch.float64).reshape(-1, 3)
        means = values.mean(dim=0) if len(values) else torch.zeros(3, dtype=torch.float64)
        return {"chain_f1": means[0], "chain_em": means[1], "chain_recall": means[2]}
