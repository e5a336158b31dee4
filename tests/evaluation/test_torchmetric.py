"""The Lightning-side metrics give exactly evaluate.py's numbers, single-process and under 2-process DDP (gloo)."""

from __future__ import annotations

import json
import random
import socket
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from musique_models.data.formats import read_examples
from musique_models.data.probe import make_probes
from musique_models.evaluation.evaluator import dire_results, evaluate_predictions
from musique_models.evaluation.gold import gold_from_example, read_gold
from musique_models.evaluation.metrics import aggregate_dire
from musique_models.evaluation.musique_metric import MODULE_PATH
from musique_models.evaluation.predictions import Prediction, ProbePrediction
from musique_models.evaluation.torchmetric import DireMetric, MultihopQAMetric
from tests.conftest import SAMPLES
from tests.evaluation.ddp_worker import run_rank


def _noisy_predictions(golds, seed: int) -> list[Prediction]:
    rng = random.Random(seed)
    predictions = []
    for gold in golds:
        answer = rng.choice([gold.answers[0], gold.answers[0] + " extra words", "wrong"])
        support = [idx for idx in gold.support_idxs if rng.random() < 0.7] + rng.sample(list(gold.paragraph_idxs), 1)
        answerable = gold.answerable if rng.random() < 0.8 else not gold.answerable
        predictions.append(Prediction(gold.id, answer, sorted(set(support)), answerable))
    return predictions


def _probes(examples, golds, seed: int) -> list[ProbePrediction]:
    rng = random.Random(seed)
    probes = []
    for example in examples:
        for number, probe in enumerate(make_probes(example)):
            probes.append(
                ProbePrediction(
                    example.id, number, rng.choice([example.answer, "wrong"]), rng.random(), probe.supporting_idxs[:1]
                )
            )
    return probes


def _cases() -> tuple[dict, dict]:
    """Two evaluation sets: MuSiQue-Full (paired) and an odd-sized HotpotQA set (so DDP pads), with DiRe."""
    full_golds = read_gold(SAMPLES / "musique_full/dev_derived.jsonl")
    hotpot = read_examples(SAMPLES / "hotpotqa/dev.json", "hotpotqa", "hotpotqa")
    hotpot_golds = [gold_from_example(example, row) for row, example in enumerate(hotpot)]
    full_predictions = _noisy_predictions(full_golds, 1)
    hotpot_predictions = _noisy_predictions(hotpot_golds, 2)
    probes = _probes(hotpot, hotpot_golds, 3)
    expected = {
        "full": evaluate_predictions(full_golds, full_predictions).metrics,
        "hotpot": evaluate_predictions(hotpot_golds, hotpot_predictions).metrics,
        "hotpot_dire": aggregate_dire(
            dire_results(hotpot_golds, hotpot_predictions, list(enumerate(probes)), "x", data_format="hotpotqa")
        ),
    }
    row_by_id = {gold.id: gold.row for gold in hotpot_golds}

    def as_dicts(predictions):
        return [
            {
                "predicted_answer": p.predicted_answer,
                "predicted_support_idxs": p.predicted_support_idxs,
                "predicted_answerable": p.predicted_answerable,
            }
            for p in predictions
        ]

    cases = {
        "full": {"golds": full_golds, "predictions": as_dicts(full_predictions)},
        "hotpot": {
            "golds": hotpot_golds,
            "data_format": "hotpotqa",  # DiRe's answer scores follow HotpotQA's rules
            "predictions": as_dicts(hotpot_predictions),
            "probes": [
                {
                    "row": row_by_id[p.id],
                    "probe": p.probe,
                    "predicted_answer": p.predicted_answer,
                    "predicted_answer_confidence": p.predicted_answer_confidence,
                    "predicted_support_idxs": p.predicted_support_idxs,
                }
                for p in probes
            ],
        },
    }
    return cases, expected


def test_single_process_metric_equals_evaluator_and_deduplicates_repeats() -> None:
    cases, expected = _cases()
    for name in ("full", "hotpot"):
        case = cases[name]
        metric = MultihopQAMetric(case["golds"])
        rows = list(range(len(case["golds"]))) + [0, 5, 5]  # padded repeats, as a DistributedSampler adds
        for start in range(0, len(rows), 16):
            batch = rows[start : start + 16]
            metric.update(
                batch,
                [case["predictions"][i]["predicted_answer"] for i in batch],
                [case["predictions"][i]["predicted_support_idxs"] for i in batch],
                [case["predictions"][i]["predicted_answerable"] for i in batch],
            )
        assert {key: value.item() for key, value in metric.compute().items()} == expected[name]
    case = cases["hotpot"]
    dire = DireMetric(case["golds"], data_format=case["data_format"])
    dire.update(
        range(len(case["golds"])),
        [p["predicted_answer"] for p in case["predictions"]],
        [p["predicted_support_idxs"] for p in case["predictions"]],
    )
    probes = case["probes"]
    dire.update_probes(
        [p["row"] for p in probes],
        [p["probe"] for p in probes],
        [p["predicted_answer"] for p in probes],
        [p["predicted_answer_confidence"] for p in probes],
        [p["predicted_support_idxs"] for p in probes],
    )
    assert {key: value.item() for key, value in dire.compute().items()} == expected["hotpot_dire"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_two_process_ddp_gives_exactly_the_single_process_numbers(tmp_path: Path) -> None:
    cases, expected = _cases()
    assert len(cases["hotpot"]["golds"]) % 2 == 1  # the sampler pads: the metric must drop the repeat
    mp.spawn(run_rank, args=(2, _free_port(), cases, str(tmp_path)), nprocs=2, join=True)
    for rank in (0, 1):
        results = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert results == expected


def test_local_evaluate_module_gives_the_same_numbers(tmp_path: Path) -> None:
    import evaluate

    cases, expected = _cases()
    case = cases["full"]
    metric = evaluate.load(MODULE_PATH, cache_dir=str(tmp_path))
    references = [
        {
            "id": g.id,
            "answers": list(g.answers),
            "support_idxs": list(g.support_idxs),
            "answerable": g.answerable,
            "num_hops": g.num_hops,
        }
        for g in case["golds"]
    ]
    predictions = [{"id": g.id, **p} for g, p in zip(case["golds"], case["predictions"])]
    assert metric.compute(predictions=predictions, references=references) == expected["full"]
