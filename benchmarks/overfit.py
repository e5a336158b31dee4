"""Overfit check: each model must memorise a handful of real training questions.

A pipeline that cannot memorise 8 questions has a labelling, offset or decoding bug. This script trains a model
(the whole recipe, in-process, as `train.py` would) on 8 real training questions of the shipped MuSiQue-Ans sample
(`dataset.train_size=8`, drawn with the seed), long enough and at a high enough learning rate to memorise them,
then predicts and scores the same 8 questions (`eval_split=train eval_size=8`) with the official evaluator.

Models must reach answer F1 >= 0.8 and support F1 >= 0.8 on them (Beam SA, whose retrieved chain is its support:
support F1 >= 0.95); the decomposer must rewrite them into their gold
decompositions (exact match >= 0.8); baselines (C-only, which never sees the question) are only reported. The exit
status is 1 when a model misses a threshold.

    python benchmarks/overfit.py model=select_answer              # real MiniLM (backbone=minilm)
    python benchmarks/overfit.py model=beam_select_answer         # Beam Retrieval (MiniLM), then the answerer
    python benchmarks/overfit.py model=lexical_select_answer      # BM25 (untrained), then the answerer
    python benchmarks/overfit.py model=end2end                    # MiniLM as a 4,096-position Longformer
    python benchmarks/overfit.py model=c_only                     # baseline: reported, no threshold
    python benchmarks/overfit.py model=one_para                   # 1-Para: answer F1 only (it reads one paragraph)
    python benchmarks/overfit.py model=step_execution             # the executor on the gold decomposition, then
                                                                  # the offline decomposer (MiniLM BERT2BERT)
    python benchmarks/overfit.py model=q_only                     # Q-only baseline: answers generated from the
                                                                  # question alone (MiniLM BERT2BERT)
    python benchmarks/overfit.py model=select_answer,end2end,c_only [extra Hydra overrides] [--out DIR]

Each model's settings (epochs, learning rate, batches) are one entry of `MODELS` below; extra Hydra overrides on
the command line come last and win. A later model joins with one entry there. Runs go to
`logs/overfit/<model>-<time>/` (or `<--out>/<model>-<time>/`); each holds the pipeline's own files
(`metrics.json`, `predictions.jsonl`, `config.yaml`, per-stage CSV logs, `train.log`) and `overfit.json` (the
figures of the table: settings, answer F1 / EM, support F1, final training loss per stage, wall time, verdict).
The wall time is the pipeline's (`train(cfg)`): building `minilm_long` on first use is timed apart.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import resource
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("WANDB_MODE", "offline")

from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.utils import instantiate  # noqa: E402
from omegaconf import DictConfig  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from musique_models import PROJECT_ROOT  # noqa: E402
from musique_models.features.selector import paragraphs_containing  # noqa: E402
from musique_models.report.uncertainty import read_per_question  # noqa: E402
from musique_models.run_files import PER_QUESTION_FILE, RANKING_FILE  # noqa: E402
from musique_models.runs.train import train  # noqa: E402

QUESTIONS = 8
ANSWER_F1_MIN = 0.8
SUPPORT_F1_MIN = 0.8
# The metrics each run reports (those its recipe writes, and `answer_f1_read`: see `answer_f1_where_read`).
REPORTED = ("answer_f1", "answer_em", "support_f1", "decomposition_exact_match", "decomposition_bleu")
READ_METRICS = ("answer_f1_read", "questions_read")

# Every run: the 8 training questions, scored on themselves; CPU, no checkpoints but the final weights.
COMMON = [
    "dataset=musique_ans",
    "dataset.sample=true",
    f"dataset.train_size={QUESTIONS}",
    "eval_split=train",
    f"eval_size={QUESTIONS}",
    "trainer=cpu",
    "++trainer.threads=2",
    "trainer.enable_progress_bar=false",
    "trainer.log_every_n_steps=1",
    "callbacks=none",
    "logger=csv",
]


ANSWER_AND_SUPPORT = {"answer_f1": ANSWER_F1_MIN, "support_f1": SUPPORT_F1_MIN}


@dataclass(frozen=True)
class ModelSpec:
    """One overfit run: its backbone, Hydra overrides and the metrics it must reach (none: reported only).

    `recipe`: the `model=` config when it is not the entry's name; `then`: entries run right after this one."""

    backbone: str
    overrides: list[str] = field(default_factory=list)
    thresholds: dict[str, float] = field(default_factory=lambda: dict(ANSWER_AND_SUPPORT))
    recipe: str | None = None
    then: tuple[str, ...] = ()


# Stage settings: no validation (the final weights predict), enough epochs at a high learning rate to memorise.
# Batch 1 (8 steps an epoch): with the official global attention (everything before the context) and gradient
# clipping by value, batch 2 x 20 epochs left support F1 at 0.73-0.80 (docs/benchmarks/memorisation.md).
_READER = [
    "model.reader.max_epochs=20",
    "model.reader.lr=2e-4",
    "model.reader.micro_batch_size=1",
    "model.reader.accumulate_grad_batches=1",
    "model.reader.validate=false",
    "model.reader.gradient_checkpointing=false",
]
_SELECT_ANSWER = [
    "model.selector.max_epochs=10",
    "model.selector.lr=1e-4",
    "model.selector.micro_batch_size=1",  # questions (each with its gold paragraphs and as many negatives)
    "model.selector.accumulate_grad_batches=1",
    "++model.selector.validate=false",
    "model.answerer.max_epochs=30",
    "model.answerer.lr=1e-4",
    "model.answerer.micro_batch_size=4",
    "model.answerer.accumulate_grad_batches=1",
    "++model.answerer.validate=false",
]
_GENERATIVE = [
    "backbone@model.reader.backbone=tiny_llama",
    "model.reader.finetune=full",
    "model.reader.max_paragraph_tokens=60",
    "model.reader.max_epochs=60",
    "model.reader.lr=3e-3",
    "model.reader.micro_batch_size=2",
    "model.reader.accumulate_grad_batches=1",
    "model.reader.validate=false",
]
_SMOLLM2 = [
    "model.reader.max_paragraph_tokens=40",
    "model.reader.max_epochs=15",
    "model.reader.micro_batch_size=2",
    "model.reader.accumulate_grad_batches=1",
    "model.reader.validate=false",
]
_MEMORISED = {"answer_f1": 0.9, "support_f1": 0.9}
MODELS: dict[str, ModelSpec] = {
    "select_answer": ModelSpec("minilm", _SELECT_ANSWER),
    "end2end": ModelSpec("minilm_long", _READER),
    "c_only": ModelSpec("minilm_long", _READER, thresholds={}),
    # support F1 is not required: one paragraph read of the 2-4 supporting ones
    "one_para": ModelSpec("minilm", _SELECT_ANSWER, thresholds={"answer_f1": ANSWER_F1_MIN}),
    # the executor trains on the single-hop questions of the 8 questions' gold decompositions and executes them
    "step_execution": ModelSpec(
        "minilm",
        ["executor=select_answer", "model.decomposition=gold", *_SELECT_ANSWER],
        then=("decomposer",),
    ),
    "decomposer": ModelSpec(
        "minilm",
        [
            "model.decomposer.max_epochs=60",
            "model.decomposer.lr=3e-4",
            "model.decomposer.warmup_ratio=0.1",
            "model.decomposer.micro_batch_size=2",
            "model.decomposer.validate=false",
        ],
        thresholds={"decomposition_exact_match": 0.8},
    ),
    # the answerer's backbone is minilm_bert2bert (model.answerer.backbone); it predicts no support
    "q_only": ModelSpec(
        "minilm",
        [
            "model.answerer.max_epochs=40",
            "model.answerer.lr=3e-4",
            "model.answerer.warmup_ratio=0.1",
            "model.answerer.micro_batch_size=2",
            "model.answerer.validate=false",
        ],
        thresholds={"answer_f1": 0.8},
    ),
    # Select+Answer with the generative answerer on the real offline MiniLM BERT2BERT (512 positions): the top 4
    # paragraphs (every question's 2-4 supporting ones once the selector has memorised them), each clipped to 100
    # tokens; the selector as select_answer's. Its new cross-attention learns to read the input late and unevenly
    # across initialisations (docs/benchmarks/memorisation.md)
    "select_generate": ModelSpec(
        "minilm",
        [
            *_SELECT_ANSWER[:5],
            "model.top_k=4",
            "model.answerer.max_paragraph_tokens=100",
            "model.answerer.max_epochs=120",
            "model.answerer.lr=3e-4",
            "model.answerer.micro_batch_size=2",
            "model.answerer.accumulate_grad_batches=1",
            "model.answerer.validate=false",
        ],
    ),
    # Select+Answer with Beam Retrieval as its first stage: the chains of the 8 questions must be retrieved exactly
    # (support F1 >= 0.95: the chain is the predicted support), then answered from them
    "beam_select_answer": ModelSpec(
        "minilm",
        [
            "model.selector.max_epochs=15",
            "model.selector.lr=1e-4",
            "model.selector.micro_batch_size=1",
            "model.selector.accumulate_grad_batches=1",
            "model.selector.validate=false",
            *_SELECT_ANSWER[5:],
        ],
        thresholds={"answer_f1": ANSWER_F1_MIN, "support_f1": 0.95},
    ),
    # Select+Answer with BM25 as its first stage (nothing to train there): BM25 puts the answer in its top 7 for
    # only some of the 8 questions, so the answerer must memorise those (answer F1 over the questions whose answer
    # it read); the others are out of any answerer's reach
    "lexical_select_answer": ModelSpec("minilm", _SELECT_ANSWER[5:], thresholds={"answer_f1_read": ANSWER_F1_MIN}),
    # the decoder-only reader (the tiny random Llama) over all 20 paragraphs of each question (60 tokens each),
    # every weight trained
    "generative_reader": ModelSpec("minilm", _GENERATIVE),
    # the same with LoRA (rank 64 = the model's width, the output layer trained whole): reported only, as LoRA over
    # a RANDOM frozen model does not memorise (docs/benchmarks/memorisation.md)
    "generative_reader_lora": ModelSpec(
        "minilm",
        [
            *_GENERATIVE,
            "model.reader.finetune=lora",
            "model.reader.lora_r=64",
            "model.reader.lora_alpha=64",
            "model.reader.lora_dropout=0.0",
            "model.reader.lora_modules_to_save=[lm_head]",
        ],
        thresholds={},
        recipe="generative_reader",
    ),
    # the real SmolLM2-135M-Instruct (its default backbone) over all 20 paragraphs of each question, each cut to its
    # first 40 tokens (a 135M model over 20 full paragraphs costs seconds a step on 2 cores): LoRA on every linear
    # layer, then every weight trained; both must memorise (answer and support F1 >= 0.9)
    "generative_reader_smollm2_lora": ModelSpec(
        "minilm",
        [*_SMOLLM2, "model.reader.finetune=lora", "model.reader.lr=1e-3", "model.reader.lora_dropout=0.0"],
        thresholds=dict(_MEMORISED),
        recipe="generative_reader",
    ),
    "generative_reader_smollm2_full": ModelSpec(
        "minilm",
        [*_SMOLLM2, "model.reader.finetune=full", "model.reader.lr=1e-4"],
        thresholds=dict(_MEMORISED),
        recipe="generative_reader",
    ),
}


# Recipes whose model has its own backbone (a seq2seq one), not the run's `backbone=`: the component holding it.
OWN_BACKBONE = {
    "decomposer": "decomposer",
    "q_only": "answerer",
    "select_generate": "answerer",
    "generative_reader": "reader",
    "generative_reader_lora": "reader",
}


def compose_config(model: str, output_dir: Path, extra: list[str]) -> DictConfig:
    spec = MODELS[model]
    overrides = [
        *COMMON,
        f"model={spec.recipe or model}",
        f"backbone={spec.backbone}",
        *spec.overrides,
        f"paths.output_dir={output_dir}",
        *extra,
    ]
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides)


def stage_settings(cfg: DictConfig) -> dict[str, dict]:
    """Each stage's epochs, learning rate and batch (micro-batch x accumulation), read from the composed config."""
    stages = {}
    for name, stage in cfg.model.items():
        if isinstance(stage, DictConfig) and "max_epochs" in stage and "lr" in stage:
            stages[str(name)] = {
                "epochs": int(stage.max_epochs),
                "lr": float(stage.lr),
                "batch": f"{stage.micro_batch_size}x{stage.accumulate_grad_batches}",
            }
    return stages


def final_losses(run_dir: Path) -> dict[str, float]:
    """Per stage, the mean training loss over the last epoch's logged steps (from the stage's CSV log)."""
    losses = {}
    for metrics_file in sorted(run_dir.glob("*/csv/*/metrics.csv")):
        with open(metrics_file) as handle:
            rows = list(csv.DictReader(handle))
        key = next((k for k in (rows[0] if rows else {}) if k.endswith("train/loss")), None)
        epoch_key = next((k for k in (rows[0] if rows else {}) if k.endswith("epoch")), None)
        points = [
            (float(row[epoch_key]) if epoch_key and row.get(epoch_key) else 0.0, float(row[key]))
            for row in rows
            if key and row.get(key)
        ]
        if points:
            last = max(epoch for epoch, _ in points)
            values = [loss for epoch, loss in points if epoch == last]
            losses[metrics_file.parents[2].name] = sum(values) / len(values)
    return losses


def answer_f1_where_read(run_dir: Path, table: Any) -> dict[str, float | int]:
    """Answer F1 over the questions whose answer (or an alias) is in a paragraph the answerer read (the top K of
    the run's `selector_ranking.json`), and how many those are: what a reader behind a first stage that trains
    nothing can memorise. Empty for a run without a ranking file."""
    ranking_file = run_dir / RANKING_FILE
    if not ranking_file.exists():
        return {}
    record = json.loads(ranking_file.read_text())
    read = {row["id"]: row["ranking"][: record["top_k"]] for row in record["rankings"]}
    scores = {row["id"]: row["answer_f1"] for row in read_per_question(str(run_dir / PER_QUESTION_FILE))}
    reachable = [
        question_id
        for question_id, paragraphs, answer, aliases in zip(
            table["id"], table["paragraphs"], table["answer"], table["answer_aliases"], strict=True
        )
        if set(paragraphs_containing(paragraphs, [answer, *aliases])) & set(read[question_id])
    ]
    if not reachable:
        return {"answer_f1_read": 0.0, "questions_read": 0}
    return {
        "answer_f1_read": sum(scores[question_id] for question_id in reachable) / len(reachable),
        "questions_read": len(reachable),
    }


def run_model(model: str, out: Path, extra: list[str], console: Console) -> dict:
    run_dir = out / f"{model}-{datetime.now():%Y-%m-%d_%H-%M-%S}"
    run_dir.mkdir(parents=True)
    cfg = compose_config(model, run_dir, extra)
    spec = MODELS[model]
    handler = logging.FileHandler(run_dir / "train.log")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    logging.getLogger().addHandler(handler)
    try:
        prepare_start = time.perf_counter()
        instantiate(cfg.backbone).model_dir()  # builds a converted backbone (minilm_long) on first use
        prepare_s = time.perf_counter() - prepare_start
        start = time.perf_counter()
        train(cfg)
        wall_s = time.perf_counter() - start
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    trained = instantiate(cfg.dataset).load("train")
    trained_ids = set(trained["id"])
    scored_file = run_dir / (
        "predictions.jsonl" if (run_dir / "predictions.jsonl").exists() else "decompositions.jsonl"
    )
    with open(scored_file) as handle:
        scored_ids = {json.loads(line)["id"] for line in handle if line.strip()}
    if scored_ids != trained_ids or len(trained_ids) != QUESTIONS:
        raise SystemExit(f"{model}: the scored questions are not the {QUESTIONS} trained ones")
    metrics.update(answer_f1_where_read(run_dir, trained))
    passed = all(float(metrics[name]) >= minimum for name, minimum in spec.thresholds.items())
    recipe = spec.recipe or model
    result = {
        "model": model,
        "backbone": (cfg.model[OWN_BACKBONE[recipe]] if recipe in OWN_BACKBONE else cfg).backbone.name,
        "questions": QUESTIONS,
        "settings": {  # the stages that ran (a Step Execution stage's folder is `executor_<stage>`)
            name: settings
            for name, settings in stage_settings(cfg).items()
            if any(folder.is_dir() and folder.name.endswith(name) for folder in run_dir.iterdir())
        },
        "overrides": [*spec.overrides, *extra],
        **{name: float(metrics[name]) for name in REPORTED if name in metrics},
        **{name: metrics[name] for name in READ_METRICS if name in metrics},
        "thresholds": spec.thresholds,
        "final_train_loss": final_losses(run_dir),
        "wall_s": round(wall_s, 1),
        # the process's peak resident memory so far (run one model per invocation for a model's own figure)
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "backbone_prepare_s": round(prepare_s, 1),
        "verdict": ("PASS" if passed else "FAIL") if spec.thresholds else "report only",
        "run_dir": str(run_dir),
    }
    (run_dir / "overfit.json").write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"{model}: {run_dir / 'overfit.json'}")
    return result


def results_table(results: list[dict]) -> Table:
    table = Table(
        title=f"Overfit on {QUESTIONS} MuSiQue-Ans training questions (thresholds: answer F1 and support "
        f"F1 >= {ANSWER_F1_MIN}; decomposer: exact match >= 0.8)"
    )
    for column in (
        "model",
        "backbone",
        "settings (epochs, lr, batch)",
        "final train loss",
        "scores",
        "wall",
        "verdict",
    ):
        table.add_column(column)
    for r in results:
        settings = "\n".join(
            f"{stage}: {s['epochs']} ep, lr {s['lr']:g}, batch {s['batch']}" for stage, s in r["settings"].items()
        )
        losses = "\n".join(f"{stage}: {loss:.3f}" for stage, loss in r["final_train_loss"].items())
        scores = "\n".join(f"{name}: {r[name]:.3f}" for name in REPORTED if name in r)
        if "answer_f1_read" in r:
            scores += f"\nanswer_f1_read: {r['answer_f1_read']:.3f} ({r['questions_read']} read)"
        wall = f"{r['wall_s'] / 60:.1f} min\n{r['peak_rss_mib']} MiB peak"
        table.add_row(r["model"], r["backbone"], settings, losses, scores, wall, r["verdict"])
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("overrides", nargs="*", help="model=<name>[,<name>...] then extra Hydra overrides")
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "logs" / "overfit", help="folder of the runs")
    args = parser.parse_args(argv)
    models = [o.split("=", 1)[1] for o in args.overrides if o.startswith("model=")]
    extra = [o for o in args.overrides if not o.startswith("model=")]
    requested = [name for value in models for name in value.split(",")] or ["select_answer"]
    names = [name for first in requested for name in (first, *MODELS[first].then) if first in MODELS] or requested
    unknown = [name for name in requested if name not in MODELS]
    if unknown:
        parser.error(f"no overfit settings for {', '.join(unknown)} (known: {', '.join(MODELS)})")
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("musique_models").setLevel(logging.INFO)
    console = Console(width=None if sys.stdout.isatty() else 160)
    results = [run_model(name, args.out, extra, console) for name in names]
    console.print(results_table(results))
    if len(results) > 1:
        args.out.mkdir(parents=True, exist_ok=True)
        summary = args.out / f"overfit-{datetime.now():%Y-%m-%d_%H-%M-%S}.json"
        summary.write_text(json.dumps(results, indent=2) + "\n")
        console.print(f"all figures: {summary}")
    return 1 if any(r["verdict"] == "FAIL" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
