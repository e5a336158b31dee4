"""benchmarks/bench_selectors.py at tiny scale: every system trains the same number of optimizer steps on the same
questions, and its figures are the chain scores of what it predicted (checked on known cases)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from musique_models import PROJECT_ROOT


def _bench():
    spec = importlib.util.spec_from_file_location("bench_selectors", PROJECT_ROOT / "benchmarks" / "bench_selectors.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_chain_scores_and_the_best_threshold_on_known_cases() -> None:
    bench = _bench()
    scores = bench.chain_scores([[1, 2], [3]], [[1, 2], [3, 4]])
    assert scores == pytest.approx({"support_f1": (1.0 + 2 / 3) / 2, "chain_exact_match": 0.5, "gold_recall": 0.75})
    # question 0: gold {5, 6} scored 0.9, 0.8 over 0.1; question 1: gold {7} scored 0.7, under 0.75: at 0.7 both
    # are taken (mean F1 (1 + 2/3) / 2), at 0.75 or 0.8 the wrong one alone (mean 1/2), at 0.1 everything
    scored = [[(0.9, 5), (0.8, 6), (0.1, 2)], [(0.75, 8), (0.7, 7)]]
    threshold, support = bench.best_threshold(scored, [[5, 6], [7]])
    assert threshold == 0.7 and support == [[5, 6], [8, 7]]
    # above every score of a question, its top paragraph stands in: at 0.9 question 1 keeps paragraph 2
    assert bench.best_threshold([[(0.9, 1), (0.8, 9)], [(0.5, 2)]], [[1], [2]]) == (0.9, [[1], [2]])


def test_the_selector_benchmark_runs_every_system_at_tiny_scale(tmp_path: Path) -> None:
    bench = _bench()
    out = tmp_path / "selectors.json"
    arguments = ["--backbone", "tiny", "--train-questions", "3", "--dev-questions", "4", "--epochs", "1"]
    assert (
        bench.main([*arguments, "--beams", "1,2", "--max-length", "64", "--json", str(out), "--out", str(tmp_path)])
        == 0
    )
    results = json.loads(out.read_text())
    systems = results["systems"]
    assert sorted(systems) == sorted(
        ["paper selector, top 7", "paper selector, top h", "paper selector, best threshold"]
        + ["Beam Retrieval, beam 1", "Beam Retrieval, beam 2"]
    )
    assert {system["optimizer_steps"] for system in systems.values()} == {3}
    for system in systems.values():
        assert 0.0 <= system["support_f1"] <= 1.0 and system["predict_seconds_per_question"] > 0
    # the top 7 of 20 paragraphs hold at least what the top h (2-4) hold
    assert systems["paper selector, top 7"]["gold_recall"] >= systems["paper selector, top h"]["gold_recall"]
