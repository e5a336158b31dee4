"""Prediction with a trained run: the whole `evaluate.py run=` path against the bare forward passes over the same
features, side by side in one run, with a MiniLM Select+Answer run on the 200 questions of the shipped MuSiQue-Ans
dev sample (4,000 selector pairs, the answerer's top-7 windows), on 2 CPU threads:

(a) `evaluate.py run=RUN` in process (`score_run`): load both best checkpoints, load the split, featurise, rank,
    read, decode, write `predictions.jsonl`, score, write `metrics.json`;
(b) bare forward passes: only `predict_step` over the very batches (a) collated, recorded while (a) ran.

Target: (a) <= 1.15 x (b): everything around the models costs at most 15%. The forward passes' own time within (a)
is reported too (what (a) spent outside them is the overhead measured a second way, in the same run). Batches are length-sorted (the
prediction loaders bucket by length), so padding is small.

The run is trained first by `train.py` with one batch per stage (`trainer.fast_dev_run`): its weights are MiniLM's,
its shapes and costs those of any trained run. A finished run in `--out` is reused.

    python benchmarks/bench_predict.py [--out DIR] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("WANDB_MODE", "offline")

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from musique_models import PROJECT_ROOT  # noqa: E402
from musique_models.runs.score import score_run  # noqa: E402
from musique_models.runs.train import train  # noqa: E402
from musique_models.training import inference  # noqa: E402

TARGET = 1.15
THREADS = 2


def compose_config(name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose(name, overrides=overrides)


def trained_run(out: Path) -> Path:
    """A finished MiniLM Select+Answer run on the MuSiQue-Ans sample (one batch per stage), reused when present."""
    run_dir = out / "run"
    status = run_dir / "status.json"
    if not status.exists() or json.loads(status.read_text())["status"] != "finished":
        train(
            compose_config(
                "train",
                [
                    "backbone=minilm",
                    "dataset=musique_ans",
                    "dataset.sample=true",
                    "trainer=cpu",
                    f"trainer.threads={THREADS}",
                    "trainer.fast_dev_run=true",
                    "trainer.enable_progress_bar=false",
                    "logger=none",
                    "callbacks=none",
                    f"paths.cache_dir={out / 'cache'}",
                    f"paths.output_dir={run_dir}",
                ],
            )
        )
    return run_dir


def recording_predictors() -> tuple[list[inference.BatchPredictor], list[float]]:
    """Every `BatchPredictor` built from now on keeps the batches it collates (in the returned list), and the time
    of each of its `forward` calls goes into the returned list of seconds."""
    built: list[inference.BatchPredictor] = []
    forward_seconds: list[float] = []
    original_init, original_forward = inference.BatchPredictor.__init__, inference.BatchPredictor.forward

    def init(self, *args, **kwargs) -> None:
        original_init(self, *args, **kwargs)
        self.recorded = []
        built.append(self)

    def forward(self, batches):
        start = time.perf_counter()
        outputs = original_forward(self, batches)
        forward_seconds.append(time.perf_counter() - start)
        return outputs

    inference.BatchPredictor.__init__ = init
    inference.BatchPredictor.forward = forward
    return built, forward_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "logs" / "bench_predict")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    run_dir = trained_run(args.out)
    torch.set_num_threads(THREADS)
    predictors, forward_seconds = recording_predictors()
    output = args.out / "evaluation"
    cfg = compose_config("evaluate", [f"run={run_dir}", f"threads={THREADS}", f"output={output}"])

    start = time.perf_counter()
    metrics = score_run(cfg)
    whole_s = time.perf_counter() - start

    forward_in_whole_s = sum(forward_seconds)
    start = time.perf_counter()
    for predictor in predictors:
        for batches in predictor.recorded:
            predictor.forward(batches)
    bare_s = time.perf_counter() - start

    rows = sum(len(batch["input_ids"]) for p in predictors for batches in p.recorded for batch in batches)
    tokens = sum(int(batch["attention_mask"].sum()) for p in predictors for b in p.recorded for batch in b)
    padded = sum(batch["input_ids"].numel() for p in predictors for batches in p.recorded for batch in batches)
    ratio = whole_s / bare_s
    results = {
        "questions": int(metrics["count"]),
        "model_inputs": rows,
        "real_tokens": tokens,
        "padded_tokens": padded,
        "whole_evaluate_run_s": round(whole_s, 2),
        "bare_forward_s": round(bare_s, 2),
        "forward_within_whole_s": round(forward_in_whole_s, 2),
        "whole_over_forward_within": round(whole_s / forward_in_whole_s, 3),
        "whole_over_bare": round(ratio, 3),
        "overhead_percent": round(100 * (ratio - 1), 1),
        "target": f"whole_over_bare <= {TARGET}",
        "verdict": "PASS" if ratio <= TARGET else "FAIL",
        "torch_threads": torch.get_num_threads(),
        "answer_f1": metrics["answer_f1"],
    }
    report = Table(title=f"evaluate.py run= on {results['questions']} questions, Select+Answer, MiniLM, CPU")
    report.add_column("variant")
    report.add_column("wall", justify="right")
    report.add_column("vs bare forward", justify="right")
    for label, seconds in (
        ("(a) evaluate.py run= (load, featurise, forward, decode, write, score)", whole_s),
        ("    of which the forward passes", forward_in_whole_s),
        ("(b) bare forward passes over (a)'s batches, again", bare_s),
    ):
        report.add_row(label, f"{seconds:.1f} s", f"{seconds / bare_s:.3f}x")
    console = Console(width=140)
    console.print(report)
    console.print(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
