"""The GPU throughput script (`benchmarks/gpu_end2end_throughput.py`) runs end to end on CPU at tiny shapes, so it
is known to work before it is spent on a lent GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from musique_models import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "benchmarks" / "gpu_end2end_throughput.py"


def test_gpu_script_runs_tiny_on_cpu(tmp_path: Path) -> None:
    output = tmp_path / "gpu_end2end.json"
    env = {key: value for key, value in os.environ.items() if key != "OUT"}  # OUT would redirect the JSON
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--json", str(output)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(output.read_text())
    assert results["tiny"] and results["gradient_checkpointing"]
    runs = {run["batch_size"]: run for run in results["runs"]}
    assert sorted(runs) == [1, 2, 4]
    for _batch_size, run in runs.items():
        assert run["stopped"] is None, run
        assert run["timed_steps"] == 2
        assert run["questions_per_s"] > 0 and run["tokens_per_s"] > 0, run
        assert abs(run["tokens_per_s"] - 512 * run["questions_per_s"]) < 1e-6 * run["tokens_per_s"]
    assert "questions/s" in result.stdout
