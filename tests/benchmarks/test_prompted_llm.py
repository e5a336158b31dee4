"""benchmarks/prompted_llm.py: its chance baseline is the expected support F1 of a random guess, and a cell's
figures are read from the run folder (intervals around the run's own means, the unparsed share)."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest

from musique_models import PROJECT_ROOT
from musique_models.evaluation.metrics import support_scores

spec = importlib.util.spec_from_file_location("prompted_llm", PROJECT_ROOT / "benchmarks" / "prompted_llm.py")
prompted = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prompted)


def test_chance_support_f1_is_the_expected_f1_of_a_random_guess() -> None:
    # two gold paragraphs of 20, two guessed: expected hits 2 * 2/20, so F1 = hits / 2 = 0.1 on average; 4 of 20: 0.2
    rows = [{"id": str(row), "gold_support_idxs": [3, 9], "predicted_support_idxs": []} for row in range(3)]
    rows.append({"id": "3", "gold_support_idxs": [1, 3, 5, 7], "predicted_support_idxs": []})
    assert prompted.chance_support_f1(rows, {str(row): 20 for row in range(4)}) == pytest.approx(0.125)
    # and a random draw agrees with it
    draw = random.Random(0)
    drawn = [support_scores(draw.sample(range(20), 2), [3, 9]).f1 for _ in range(20000)]
    assert sum(drawn) / len(drawn) == pytest.approx(0.1, abs=0.005)
    # all paragraphs gold: any guess is right
    rows = [{"id": "a", "gold_support_idxs": [0, 1], "predicted_support_idxs": []}]
    assert prompted.chance_support_f1(rows, {"a": 2}) == 1.0


def test_a_cells_figures_come_from_its_run_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {
            "id": f"q{n}",
            "answer_f1": float(n % 2),
            "support_f1": 0.5,
            "counts_toward": ["answer", "support"],
            "gold_support_idxs": [0, 1],
            "predicted_support_idxs": [0],
        }
        for n in range(10)
    ]
    (run / "metrics.per_question.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (run / "metrics.json").write_text(json.dumps({"answer_f1": 0.5, "unparsed_generations": 2.0}))
    (run / "generation_speed.json").write_text(
        json.dumps({"questions": 10, "prompt_tokens": 1000, "generated_tokens": 50, "seconds": 5.0})
    )
    counts = {f"q{n}": 20 for n in range(10)}
    figures = prompted.cell_figures(run, 12.0, paragraph_counts=counts)
    assert figures["answer_f1"]["mean"] == 0.5 and figures["answer_f1"]["low"] < 0.5 < figures["answer_f1"]["high"]
    assert figures["support_f1"]["low"] == figures["support_f1"]["high"] == 0.5
    assert figures["unparsed_share"] == 0.2 and figures["generated_tokens_per_s"] == 10.0
    assert figures["tokens_per_s"] == 210.0 and figures["prompt_tokens_per_question"] == 100


def test_fine_tuned_minus_prompted_is_paired_by_question_id(tmp_path: Path) -> None:
    def run_with(name: str, scores: dict[str, float]) -> Path:
        run = tmp_path / name
        run.mkdir()
        rows = [
            {"id": qid, "answer_f1": score, "support_f1": 1.0, "counts_toward": ["answer", "support"]}
            for qid, score in scores.items()
        ]
        # an unanswerable twin (MuSiQue-Full) counts toward no answer metric: never paired
        rows.append({"id": "twin", "answer_f1": 1.0, "support_f1": 1.0, "counts_toward": ["sufficiency"]})
        (run / "metrics.per_question.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        return run

    # written in another order
    fine_tuned = run_with("tuned", {"c": 1.0, "a": 1.0, "b": 0.0})
    prompted_run = run_with("prompted", {"a": 0.0, "b": 0.0, "c": 1.0})
    figures = prompted.paired_figures(fine_tuned, prompted_run)
    assert figures["questions"] == 3
    assert figures["answer_f1"]["mean"] == pytest.approx(1 / 3)
    assert figures["answer_f1"]["low"] == 0.0 and figures["answer_f1"]["high"] == 1.0
    assert figures["support_f1"]["mean"] == figures["support_f1"]["low"] == figures["support_f1"]["high"] == 0.0

    # cells that scored different questions are not paired silently
    with pytest.raises(ValueError, match="scored different questions"):
        prompted.paired_figures(run_with("more", {"a": 0.0, "b": 0.0, "c": 1.0, "d": 1.0}), prompted_run)


def test_a_later_call_keeps_the_cells_measured_before() -> None:
    earlier = {"a": {"run": "a", "cell": "0-shot"}, "b": {"run": "b", "cell": "3-shot"}}
    now = [{"run": "b", "cell": "3-shot", "new": True}, {"run": "c", "cell": "Q-only"}]
    assert prompted.kept_rows(earlier, now) == [{"run": "a", "cell": "0-shot"}]
