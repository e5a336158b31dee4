"""The GPU check (`benchmarks/gpu_check.py`) runs end to end on CPU at tiny shapes, so it is known to work before it
is spent on a lent GPU: every component of the paper grid's plan measured, its rates consistent with its step
times, the projection written; and its time guard still writes what it has."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from musique_models import PROJECT_ROOT
from tests.conftest import run_python

SCRIPT = str(PROJECT_ROOT / "benchmarks" / "gpu_check.py")
NO_OUT = {"OUT": ""}  # the files go where --json and --markdown say


@pytest.mark.slow
def test_every_component_of_the_paper_grid_is_measured_at_tiny_shapes(tmp_path: Path) -> None:
    json_path, markdown_path = tmp_path / "gpu_check.json", tmp_path / "gpu_check.md"
    result = run_python(
        [SCRIPT, "--device", "cpu", "--tiny", "--json", str(json_path), "--markdown", str(markdown_path)],
        env=NO_OUT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(json_path.read_text())
    assert results["tiny"] and results["device_type"] == "cpu" and results["overrides"] == ["experiment=paper_grid"]
    assert len(results["plan"]["jobs"]) == 34
    components = results["components"]
    assert sorted(components) == sorted(results["plan"]["grid_steps"])  # every component of the plan
    # each paper system's architecture, training and predicting
    for backbone, kind in [
        ("roberta_large", "selector"),
        ("longformer_large", "reader"),
        ("bart_large", "seq2seq"),
        ("t5_large", "seq2seq"),
        ("deberta_v3_base", "beam_retriever"),
        ("deberta_v3_large", "beam_retriever"),
    ]:
        for mode in ("train", "predict"):
            assert any(key.startswith(f"{backbone}/{kind}/{mode}/") for key in components), (backbone, kind, mode)
    assert "longformer_large/reader/train/b4x4096p20/ckpt" in components  # End2End: 4 x 4,000 tokens, checkpointed
    assert "longformer_large/reader/train/b4x3072p7/ckpt" in components  # SA's answerer: 7 x 400 tokens
    for key, record in components.items():
        assert record["stopped"] is None and record["timed_steps"] == 2, (key, record.get("stopped"))
        times = record["step_times_s"]
        assert all(step > 0 for step in times) and record["step_s"] == statistics.median(times)
        assert record["tokens_per_step"] > 0
        assert record["tokens_per_s"] == pytest.approx(record["tokens_per_step"] / record["step_s"], rel=1e-12)
        shape = record["measured_shape"]
        assert shape["batch"] <= 2 and shape["tokens"] <= 128
        assert record["examples_per_s"] == pytest.approx(shape["batch"] / record["step_s"], rel=1e-12)
        if record["kind"] != "beam_retriever":  # the retriever's tokens are counted as its encoder reads them
            rows_tokens = shape["tokens"] + (shape["target_tokens"] if record["kind"] == "seq2seq" else 0)
            assert record["tokens_per_step"] == shape["batch"] * rows_tokens, key
        assert record["model_flops_per_step"] > 0 and record["mfu"] is None  # no known peak on CPU
        assert record["peak_memory_gib"] is None and record["process_max_rss_gib"] > 0

    # the projection: the plan's steps times these step times
    projection = results["projection"]
    assert projection["missing"] == {} and len(projection["jobs"]) == 34
    jobs = {job["name"]: job for job in projection["jobs"]}
    assert projection["gpu_hours"] == pytest.approx(sum(job["gpu_hours"] for job in jobs.values()), rel=1e-12)
    step = {key: record["step_s"] for key, record in components.items()}
    ee = jobs["ee_musique_ans"]  # 3 epochs of ceil(19,938 / 4) steps; 3 validations and a prediction of 2,417 by 2
    expected = (
        math.ceil(19_938 / 4) * 3 * step["longformer_large/reader/train/b4x4096p20/ckpt"]
        + math.ceil(2_417 / 2) * 4 * step["longformer_large/reader/predict/b2x4096p20"]
    ) / 3600
    assert ee["gpu_hours"] == pytest.approx(expected, rel=1e-12)

    markdown = markdown_path.read_text()
    assert markdown.startswith("# GPU check: ") and "tiny shapes (--tiny)" in markdown
    assert all(f"`{key}`" in markdown for key in components)
    assert "## Projection: experiment=paper_grid (from tiny-shape step times" in markdown
    assert sum(line.startswith(f"| {name} |") for line in markdown.splitlines() for name in jobs) == 34
    assert "| total (34 jobs) |" in markdown and "wall " in result.stdout


@pytest.mark.slow
def test_the_time_guard_still_writes_what_it_has(tmp_path: Path) -> None:
    json_path = tmp_path / "gpu_check.json"
    result = run_python(
        [
            SCRIPT,
            "--device",
            "cpu",
            "--tiny",
            "--budget-s",
            "1",
            "--json",
            str(json_path),
            "experiment=q_only_2wiki_20k",
        ],
        env=NO_OUT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(json_path.read_text())
    assert results["plan"]["jobs"] == ["q_only_2wiki_20k"] and len(results["components"]) == 2
    assert all(record["stopped"] == "time guard before start" for record in results["components"].values())
    assert sorted(results["projection"]["missing"]) == sorted(results["components"])
    assert results["projection"]["gpu_hours"] is None


@pytest.mark.slow
def test_cuda_without_a_cuda_device_is_one_line() -> None:
    result = run_python([SCRIPT, "--device", "cuda", "--tiny"], env=NO_OUT, timeout=120)
    assert result.returncode == 2 and "--device cuda: no CUDA device here" in result.stderr
    assert "Traceback" not in result.stderr
