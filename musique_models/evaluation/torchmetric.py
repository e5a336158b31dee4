"""torchmetrics wrappers of the one metrics implementation, safe under DDP.

Each rank scores its own predictions as they come (strings never cross processes) and keeps one row of numbers
per instance, keyed by the instance's row in the evaluation split. `compute()` gathers every rank's rows,
drops the repeats a `DistributedSampler` pads with (same row index), then runs the same aggregation as
`evaluate.py`, so both give identical numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from musique_models.evaluation.gold import GoldInstance
from musique_models.evaluation.metrics import (
    InstanceResult,
    Scores,
    aggregate,
    aggregate_dire,
    answer_scores,
    dire_answer_scores,
    dire_question_result,
    support_scores,
)

# float64 holds integers exactly up to 2**53, so a support bitmask can cover idx 0..52.
_MAX_BITMASK_IDX = 52


def _scores_row(scores: Scores) -> list[float]:
    return [scores.precision, scores.recall, scores.f1, scores.em]


def _scores(values: Sequence[float]) -> Scores:
    return Scores(*(float(value) for value in values))


def state_table(state: list[torch.Tensor] | torch.Tensor, width: int) -> torch.Tensor:
    """A list state before sync, a tensor after: either way one (rows, width) CPU table."""
    if isinstance(state, list):
        state = dim_zero_cat(state) if state else torch.zeros(0, width, dtype=torch.float64)
    return state.reshape(-1, width).cpu()


def _first_per_row(table: torch.Tensor) -> torch.Tensor:
    """Rows of `table` with a unique key in column 0 (the first kept), sorted by that key."""
    if table.numel() == 0:
        return table
    order = torch.argsort(table[:, 0], stable=True)
    table = table[order]
    keep = torch.ones(len(table), dtype=torch.bool)
    keep[1:] = table[1:, 0] != table[:-1, 0]
    return table[keep]


def _support_bitmask(idxs: Sequence[int]) -> int:
    mask = 0
    for idx in idxs:
        if not 0 <= idx <= _MAX_BITMASK_IDX:
            raise ValueError(f"support idx {idx} outside 0..{_MAX_BITMASK_IDX} cannot be synced as a bitmask")
        mask |= 1 << idx
    return mask


def _bitmask_idxs(mask: int) -> list[int]:
    return [idx for idx in range(_MAX_BITMASK_IDX + 1) if mask >> idx & 1]


class MultihopQAMetric(Metric):
    """An, Sp, Sf, paired MuSiQue-Full and per-hop metrics over an evaluation split (see `aggregate`).

    Args:
        golds: the split's gold instances, indexed by row (`gold_from_example(example, row)`).
    """

    full_state_update = False
    higher_is_better = True

    def __init__(self, golds: Sequence[GoldInstance], **kwargs) -> None:
        super().__init__(**kwargs)
        self.golds = list(golds)
        # columns: row, predicted_answerable, answer p/r/f1/em, support p/r/f1/em
        self.add_state("instances", default=[], dist_reduce_fx="cat")

    def update(
        self,
        rows: Sequence[int],
        predicted_answers: Sequence[str],
        predicted_supports: Sequence[Sequence[int]],
        predicted_answerable: Sequence[bool],
    ) -> None:
        """Score a batch of predictions for the gold rows `rows`."""
        values = []
        for row, answer, support, answerable in zip(
            rows, predicted_answers, predicted_supports, predicted_answerable, strict=True
        ):
            gold = self.golds[int(row)]
            values.append(
                [
                    float(row),
                    float(bool(answerable)),
                    *_scores_row(answer_scores(answer, gold.answers)),
                    *_scores_row(support_scores(support, gold.support_idxs)),
                ]
            )
        if values:
            self.instances.append(torch.tensor(values, dtype=torch.float64, device=self.device))

    def instance_results(self) -> list[InstanceResult]:
        """Per-instance results after syncing and de-duplication, in row order."""
        results = []
        for values in _first_per_row(state_table(self.instances, 10)).tolist():
            gold = self.golds[int(values[0])]
            results.append(
                InstanceResult(
                    row=gold.row,
                    id=gold.id,
                    num_hops=gold.num_hops,
                    gold_answerable=gold.answerable,
                    predicted_answerable=bool(values[1]),
                    answer=_scores(values[2:6]),
                    support=_scores(values[6:10]),
                )
            )
        return results

    def compute(self) -> dict[str, torch.Tensor]:
        return {
            name: torch.tensor(value, dtype=torch.float64) for name, value in aggregate(self.instance_results()).items()
        }


class DireMetric(Metric):
    """DiRe answer, support and joint scores: original predictions plus two probe predictions per question.

    Args:
        golds: the split's gold instances, indexed by row.
        data_format: the gold data's format, which picks the answer rules (`dire_answer_scores`: HotpotQA's for
            'hotpotqa', as `evaluate.py mode=dire`).

    Probe 0 counts as listed first (the order in which probe files and `evaluate.py run= mode=dire` list them), so
    a confidence tie takes probe 0's answer.
    """

    full_state_update = False
    higher_is_better = True

    def __init__(self, golds: Sequence[GoldInstance], data_format: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.golds = list(golds)
        self.data_format = data_format
        # originals: row, answer p/r/f1/em, support p/r/f1/em
        self.add_state("originals", default=[], dist_reduce_fx="cat")
        # probes: row * 2 + probe, confidence, answer p/r/f1/em, support bitmask
        self.add_state("probes", default=[], dist_reduce_fx="cat")

    def update(
        self, rows: Sequence[int], predicted_answers: Sequence[str], predicted_supports: Sequence[Sequence[int]]
    ) -> None:
        """Predictions on the original questions of gold rows `rows`."""
        values = []
        for row, answer, support in zip(rows, predicted_answers, predicted_supports, strict=True):
            gold = self.golds[int(row)]
            values.append(
                [
                    float(row),
                    *_scores_row(dire_answer_scores(answer, gold.answers, self.data_format)),
                    *_scores_row(support_scores(support, gold.support_idxs)),
                ]
            )
        if values:
            self.originals.append(torch.tensor(values, dtype=torch.float64, device=self.device))

    def update_probes(
        self,
        rows: Sequence[int],
        probes: Sequence[int],
        predicted_answers: Sequence[str],
        confidences: Sequence[float],
        predicted_supports: Sequence[Sequence[int]],
    ) -> None:
        """Predictions on probe instances: `rows` are the original questions' gold rows, `probes` 0 or 1."""
        values = []
        for row, probe, answer, confidence, support in zip(
            rows, probes, predicted_answers, confidences, predicted_supports, strict=True
        ):
            gold = self.golds[int(row)]
            values.append(
                [
                    float(int(row) * 2 + int(probe)),
                    float(confidence),
                    *_scores_row(dire_answer_scores(answer, gold.answers, self.data_format)),
                    float(_support_bitmask(support)),
                ]
            )
        if values:
            self.probes.append(torch.tensor(values, dtype=torch.float64, device=self.device))

    def compute(self) -> dict[str, torch.Tensor]:
        probe_by_key = {int(values[0]): values for values in _first_per_row(state_table(self.probes, 7)).tolist()}
        results = []
        for values in _first_per_row(state_table(self.originals, 9)).tolist():
            gold = self.golds[int(values[0])]
            if not gold.answerable:
                continue
            pair = [probe_by_key.get(gold.row * 2 + number) for number in (0, 1)]
            if None in pair:
                raise ValueError(f"id {gold.id!r}: probe predictions missing")
            results.append(
                dire_question_result(
                    question_id=gold.id,
                    num_hops=gold.num_hops,
                    gold_support=gold.support_idxs,
                    original_answer=_scores(values[1:5]),
                    original_support=_scores(values[5:9]),
                    probe_answers=[_scores(probe[2:6]) for probe in pair],
                    probe_confidences=[probe[1] for probe in pair],
                    probe_supports=[_bitmask_idxs(int(probe[6])) for probe in pair],
                )
            )
        return {name: torch.tensor(value, dtype=torch.float64) for name, value in aggregate_dire(results).items()}
