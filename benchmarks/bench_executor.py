"""Step Execution's hop-batched executor against a per-question loop and against the bare forward passes, side by
side in one run, with the same trained MiniLM executor (`executor=select_answer`: selector and answerer) on the
200 questions of the shipped MuSiQue-Ans dev sample and their gold decompositions:

(a) hop-batched: `execute_steps` (step k of every question in one batched prediction per model, then step k+1);
(b) per question: the same `execute_steps` called on one question at a time (a Python loop around the model);
(c) bare forward passes: only `predict_step` over the very batches (a) featurised, recorded while (a) ran.

(a) and (b) must give identical steps (sub-questions, answers, paragraphs); the target is (a) <= 1.25 x (c): the
orchestration, the featurisation of each hop and the decoding cost at most a quarter on top of the models.

The executor is trained first by `train.py` with short stages (selector 1 epoch, answerer 2), so that it answers
like a trained model, then loaded from that run's best checkpoints (`recipe.load`: nothing trains again).

    python benchmarks/bench_executor.py [--out DIR] [--repeats 1] [--json results.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("WANDB_MODE", "offline")

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.utils import instantiate  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from musique_models import PROJECT_ROOT  # noqa: E402
from musique_models.data.schema import Example  # noqa: E402
from musique_models.evaluation.gold import gold_from_example  # noqa: E402
from musique_models.recipes.base import RunContext  # noqa: E402
from musique_models.recipes.build import instantiate_recipe  # noqa: E402
from musique_models.recipes.select_answer import SelectAnswerPredictor  # noqa: E402
from musique_models.recipes.step_execution import execute_steps  # noqa: E402
from musique_models.runs.train import train  # noqa: E402

TARGET = 1.25


def compose_config(run_dir: Path, cache: Path, extra: list[str]):
    overrides = [
        "model=step_execution",
        "executor=select_answer",
        "model.decomposition=gold",
        "backbone=minilm",
        "dataset=musique_ans",
        "dataset.sample=true",
        "model.selector.max_epochs=1",
        "model.answerer.max_epochs=2",
        "trainer=cpu",
        "++trainer.threads=2",
        "trainer.enable_progress_bar=false",
        "logger=none",
        "callbacks=none",
        f"paths.cache_dir={cache}",
        f"paths.output_dir={run_dir}",
        *extra,
    ]
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides)


def trained_executor(cfg) -> tuple[SelectAnswerPredictor, RunContext]:
    """The executor of a finished run (loaded from its best checkpoints, nothing trains) and the run's context."""
    source = instantiate(cfg.dataset)
    evaluation = source.load(cfg.eval_split)
    context = RunContext(
        cfg=cfg,
        source=source,
        train=evaluation,  # unused: nothing trains
        evaluation=evaluation,
        eval_golds=[gold_from_example(Example.from_dict(row), i) for i, row in enumerate(evaluation)],
        run_dir=Path(cfg.paths.output_dir),
        loggers=[],
    )
    recipe = instantiate_recipe(cfg)
    return recipe.load(cfg, context.run_dir).executor, context


def timed(function):
    start = time.perf_counter()
    value = function()
    return value, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "logs" / "bench_executor")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides of the executor's run")
    args = parser.parse_args()
    torch.set_num_threads(2)
    run_dir = args.out / "run"
    cfg = compose_config(run_dir, args.out / "cache", args.overrides)
    status = json.loads((run_dir / "status.json").read_text())["status"] if (run_dir / "status.json").exists() else None
    if status != "finished":
        if status is not None:  # a run stopped before it finished: it goes on from its resume points
            cfg.ckpt_path = "last"
        train(cfg)
    executor, context = trained_executor(cfg)
    table = context.evaluation
    templates = [[step["question"] for step in steps] for steps in table["decomposition"]]

    predictors = {"selector": executor.ranker.batches, "answerer": executor.reader.batches}
    for predictor in predictors.values():
        predictor.recorded = []
    batched, batched_s = timed(lambda: execute_steps(executor, table, templates))
    recorded = {name: predictor.recorded for name, predictor in predictors.items()}
    for predictor in predictors.values():
        predictor.recorded = None
    per_question, per_question_s = timed(
        lambda: [execute_steps(executor, table.select([row]), [templates[row]])[0] for row in range(len(table))]
    )
    _, bare_s = timed(
        lambda: [predictor.forward(batches) for name, predictor in predictors.items() for batches in recorded[name]]
    )
    identical = [[dataclasses.asdict(s) for s in steps] for steps in batched] == [
        [dataclasses.asdict(s) for s in steps] for steps in per_question
    ]
    answers_identical = [[(s.question, s.answer, s.paragraph) for s in steps] for steps in batched] == [
        [(s.question, s.answer, s.paragraph) for s in steps] for steps in per_question
    ]
    steps = sum(len(steps) for steps in batched)
    results = {
        "questions": len(table),
        "steps": steps,
        "hops": max(map(len, templates)),
        "hop_batched_s": round(batched_s, 2),
        "per_question_s": round(per_question_s, 2),
        "bare_forward_s": round(bare_s, 2),
        "hop_batched_over_bare": round(batched_s / bare_s, 3),
        "speedup_over_per_question": round(per_question_s / batched_s, 2),
        "identical_steps": identical,
        "identical_questions_answers_paragraphs": answers_identical,
        "target": f"hop_batched_over_bare <= {TARGET}",
        "verdict": "PASS" if batched_s / bare_s <= TARGET and answers_identical else "FAIL",
        "torch_threads": torch.get_num_threads(),
    }
    report = Table(
        title=f"Step Execution on {len(table)} questions ({steps} steps), executor=select_answer, MiniLM, CPU"
    )
    report.add_column("variant")
    report.add_column("wall", justify="right")
    report.add_column("vs bare forward", justify="right")
    for label, seconds in (
        ("(a) hop-batched execute_steps", batched_s),
        ("(b) per-question loop", per_question_s),
        ("(c) bare forward passes of (a)'s batches", bare_s),
    ):
        report.add_row(label, f"{seconds:.1f} s", f"{seconds / bare_s:.2f}x")
    console = Console(width=140)
    console.print(report)
    console.print(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
