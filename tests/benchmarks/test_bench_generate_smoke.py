"""benchmarks/bench_generate.py at tiny scale: the three timings run on the same questions and the batched reader
gives the answers generating one question at a time gives."""

from __future__ import annotations

import importlib.util

import pytest

from musique_models import PROJECT_ROOT


@pytest.mark.slow
def test_the_generation_benchmark_runs_at_tiny_scale() -> None:
    spec = importlib.util.spec_from_file_location("bench_generate", PROJECT_ROOT / "benchmarks" / "bench_generate.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.main(["--backbone", "tiny_llama", "--questions", "6", "--batch-size", "3", "--steps", "2"])
    assert result["questions"] == 6 and result["batches"] == 2
    # a comparison of empty generations could not fail: the tiny reader must have written something
    assert result["mean_generated_tokens"] > 0
    assert result["same_answers_batched_and_one_at_a_time"] and result["same_generations_batched_and_one_at_a_time"]
    assert result["batched_s"] > 0 and result["bare_generate_s"] > 0 and result["one_at_a_time_s"] > 0
