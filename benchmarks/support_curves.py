"""Why support lags the answer: learning curves of answer F1 and support F1 on 8 memorised questions, with each
head's share of the gradient, under the official and the former settings.

Each run trains a reader through `train.py`'s own path (the recipe, Hydra overrides only) on the 8 real MuSiQue-Ans
training questions that `benchmarks/overfit.py` memorises, at the shipped sample's batch and learning rate, and
validates on the same 8 questions after every epoch (`eval_split=train`; the figures are the final weights', at the
last validation, not the run's `metrics.json`, which scores the best answer-F1 checkpoint). A callback records,
every few optimizer steps, each head's loss and the norm of its gradient on the shared encoder (computed apart, on
the same batch, with the RNG state left untouched), the share of gradient elements that clipping by value changes,
and, at every validation, answer F1, support F1 and how the support head separates gold from other paragraphs (its
mean probability on each, and the F1 of its top-|gold| paragraphs: support ranked right but under the 0.5 threshold
shows as a high rank F1 beside a low support F1).

Settings (`--settings`):
- `official`: global attention on every token before the context and on the markers, clipping by value at 1.0 (the
  official configs' `grad_clipping`);
- `former`: global attention on the question and the markers, clipping by norm at 1.0 (this project's settings
  before it followed the official ones);
- `official_ga_norm` and `former_ga_value`: one of the two changed at a time.
Select+Answer's answerer reads 512-token windows on MiniLM (no global attention), so only the clipping differs.

    python benchmarks/support_curves.py                                   # every model and setting (about 1 h)
    python benchmarks/support_curves.py --models end2end --settings official,former --steps 100
    python benchmarks/support_curves.py --plot logs/support_curves/<time>/curves.json --figure docs/support_curves.png
    python benchmarks/support_curves.py --run logs/train/runs/<time>    # a trained run's support head on its split

Writes `logs/support_curves/<time>/curves.json` (every run's records) and `curves.png`.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("WANDB_MODE", "offline")

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from overfit import COMMON, QUESTIONS  # noqa: E402  (the same 8 questions, scored on themselves, CPU, CSV logs)

from musique_models import PROJECT_ROOT  # noqa: E402
from musique_models.models.answerer import MultiParagraphAnswerer  # noqa: E402
from musique_models.runs.train import train  # noqa: E402

RECORDS_FILE = "support_curves.jsonl"
# (stage that reads, its config key, overrides): the shipped sample's batch and learning rate, validation every epoch.
MODELS = {
    "end2end": (
        "reader",
        [
            "model=end2end",
            "backbone=minilm_long",
            "model.reader.validate=true",
            "model.reader.check_val_every_n_epoch=1",
            "model.reader.gradient_checkpointing=false",
        ],
    ),
    "select_answer": (
        "answerer",
        [
            "model=select_answer",
            "backbone=minilm",
            # the selector as benchmarks/overfit.py trains it, so that its top 7 holds the gold paragraphs
            "model.selector.max_epochs=10",
            "model.selector.micro_batch_size=1",
            "++model.selector.validate=false",
            "++model.answerer.validate=true",
            "model.answerer.check_val_every_n_epoch=1",
        ],
    ),
}
SETTINGS = {
    "official": ("before_context", "value"),
    "former": ("question", "norm"),
    "official_ga_norm": ("before_context", "norm"),
    "former_ga_value": ("question", "value"),
}


class HeadGradients(pl.Callback):
    """Records, in the reading stage's folder (`support_curves.jsonl`), each head's loss and encoder-gradient norm
    every `every_n_steps` optimizer steps, and answer/support scores at every validation."""

    def __init__(self, every_n_steps: int = 5, clip_value: float = 1.0) -> None:
        self.every_n_steps = every_n_steps
        self.clip_value = clip_value
        self._gold: list[torch.Tensor] = []
        self._other: list[torch.Tensor] = []
        self._rank_f1: list[float] = []

    def _write(self, trainer: pl.Trainer, record: dict[str, Any]) -> None:
        with open(Path(trainer.default_root_dir) / RECORDS_FILE, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def on_train_batch_start(self, trainer: pl.Trainer, module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        if not isinstance(module, MultiParagraphAnswerer) or trainer.global_step % self.every_n_steps:
            return
        if batch_idx % trainer.accumulate_grad_batches:  # the first micro-batch of an optimizer step only
            return
        encoder = [parameter for parameter in module.encoder.parameters() if parameter.requires_grad]
        record: dict[str, Any] = {"kind": "gradient", "step": trainer.global_step}
        with torch.random.fork_rng():  # the same dropout masks as the training step would draw afterwards
            losses = module.head_losses(batch, module.batch_outputs(batch))
            for head, loss in losses.items():
                gradients = torch.autograd.grad(loss, encoder, retain_graph=True, allow_unused=True)
                squared = sum(float(g.pow(2).sum()) for g in gradients if g is not None)
                record[f"{head}_loss"] = float(loss)
                record[f"{head}_encoder_grad_norm"] = math.sqrt(squared)
        self._write(trainer, record)

    def on_before_optimizer_step(self, trainer: pl.Trainer, module: pl.LightningModule, optimizer: Any) -> None:
        if not isinstance(module, MultiParagraphAnswerer) or trainer.global_step % self.every_n_steps:
            return
        gradients = [p.grad for p in module.parameters() if p.grad is not None]
        elements = sum(g.numel() for g in gradients)
        clipped = sum(int((g.abs() > self.clip_value).sum()) for g in gradients)
        norm = math.sqrt(sum(float(g.pow(2).sum()) for g in gradients))
        self._write(
            trainer,
            {
                "kind": "clipping",
                "step": trainer.global_step,
                "grad_norm": norm,
                "share_clipped_by_value": clipped / max(elements, 1),
            },
        )

    def on_validation_batch_end(
        self, trainer: pl.Trainer, module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int, *_: Any
    ) -> None:
        if not isinstance(module, MultiParagraphAnswerer):
            return
        with torch.no_grad():
            probabilities = module.batch_outputs(batch)["support_logits"].sigmoid()  # (B, M)
        mask, labels = batch["marker_mask"], batch["support_labels"] > 0.5
        self._gold.append(probabilities[mask & labels])
        self._other.append(probabilities[mask & ~labels])
        for row in range(len(probabilities)):
            gold = int(labels[row][mask[row]].sum())
            if gold == 0:
                continue
            top = probabilities[row].masked_fill(~mask[row], -1.0).topk(gold).indices
            self._rank_f1.append(float(labels[row][top].float().mean()))  # precision = recall at k = |gold|

    def on_validation_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if not isinstance(module, MultiParagraphAnswerer):
            return
        metrics = trainer.callback_metrics
        gold, other = torch.cat(self._gold), torch.cat(self._other)
        self._write(
            trainer,
            {
                "kind": "validation",
                "step": trainer.global_step,
                "epoch": trainer.current_epoch,
                "answer_f1": float(metrics["val/answer_f1"]),
                "support_f1": float(metrics["val/support_f1"]),
                "support_rank_f1": sum(self._rank_f1) / max(len(self._rank_f1), 1),
                "gold_support_probability": float(gold.mean()) if len(gold) else None,
                "other_support_probability": float(other.mean()) if len(other) else None,
            },
        )
        self._gold, self._other, self._rank_f1 = [], [], []


def run(model: str, setting: str, steps: int, out: Path, extra: Sequence[str] = ()) -> dict[str, Any]:
    """Train one model under one setting for about `steps` optimizer steps; its records and final scores."""
    stage, overrides = MODELS[model]
    global_attention, clipping = SETTINGS[setting]
    run_dir = out / f"{model}-{setting}"
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        probe = compose("train", overrides=[*COMMON, *overrides, f"paths.output_dir={run_dir}"])
        batch = int(probe.model[stage].micro_batch_size) * int(probe.model[stage].accumulate_grad_batches)
        # End2End: one row per question; the answerer's windows are counted after featurising, so epochs come from
        # a first estimate of 3 windows a question (the records keep the real step of every point)
        rows = QUESTIONS * (1 if model == "end2end" else 3)
        epochs = max(1, round(steps / math.ceil(rows / batch)))
        cfg = compose(
            "train",
            overrides=[
                *COMMON,
                *overrides,
                f"model.{stage}.max_epochs={epochs}",
                f"trainer.gradient_clip_algorithm={clipping}",
                f"++model.{stage}.global_attention={global_attention}",
                f"+callbacks.head_gradients._target_={__name__}.HeadGradients",
                f"paths.output_dir={run_dir}",
                *extra,
            ],
        )
    start = time.perf_counter()
    train(cfg)
    wall = time.perf_counter() - start
    (records_file,) = run_dir.glob(f"*/{RECORDS_FILE}")  # the reading stage's folder
    records = [json.loads(line) for line in records_file.read_text().splitlines()]
    final = [record for record in records if record["kind"] == "validation"][-1]  # the final weights
    return {
        "model": model,
        "setting": setting,
        "global_attention": global_attention if model == "end2end" else None,
        "clipping": clipping,
        "lr": float(cfg.model[stage].lr),
        "batch": batch,
        "epochs": epochs,
        "wall_s": round(wall, 1),
        "final": {key: final[key] for key in ("step", "answer_f1", "support_f1", "support_rank_f1")},
        "records": records,
    }


THRESHOLDS = (0.5, 0.4, 0.3, 0.2, 0.1)


def support_on_evaluation_split(run_dir: Path) -> dict[str, Any]:
    """How a trained reading run's support head does on its own evaluation split (the answerable rows): the mean
    support probability of the gold paragraphs it read and of the others, support F1 at several thresholds (0.5
    is the official one) and the F1 of its top-|gold| paragraphs among those it read (threshold-free)."""
    from hydra.utils import instantiate

    from musique_models.evaluation.metrics import support_scores
    from musique_models.runs.score import load_trained_run
    from musique_models.training.run_folder import evaluation_subset

    run = load_trained_run(run_dir)
    table = instantiate(run.cfg.dataset).load(run.cfg.eval_split)
    if run.cfg.get("eval_size"):
        table = evaluation_subset(table, run.cfg.eval_size)
    decoded = run.predictor.answer(table)
    gold_probs, other_probs, ranked, at = [], [], [], {t: [] for t in THRESHOLDS}
    for row, question in zip(table, decoded):
        if not row["answerable"]:
            continue
        gold = {p["idx"] for p in row["paragraphs"] if p["is_supporting"]}
        probs = question.support_probs
        gold_probs += [p for idx, p in probs.items() if idx in gold]
        other_probs += [p for idx, p in probs.items() if idx not in gold]
        top = sorted(probs, key=probs.__getitem__, reverse=True)[: len(gold)]
        ranked.append(support_scores(top, gold).f1)
        for threshold in THRESHOLDS:
            at[threshold].append(support_scores([i for i, p in probs.items() if p > threshold], gold).f1)
    return {
        "run": str(run_dir),
        "questions": len(ranked),
        "gold_support_probability": sum(gold_probs) / max(len(gold_probs), 1),
        "other_support_probability": sum(other_probs) / max(len(other_probs), 1),
        "gold_paragraphs_read": len(gold_probs),
        "support_rank_f1": sum(ranked) / max(len(ranked), 1),
        "support_f1_at": {str(t): sum(scores) / max(len(scores), 1) for t, scores in at.items()},
    }


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """One column per model: answer and support F1 against steps (top), support's share of the encoder gradient
    (bottom), one colour per setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in results))
    settings = list(dict.fromkeys(r["setting"] for r in results))
    figure, axes = plt.subplots(2, len(models), figsize=(6.5 * len(models), 7), squeeze=False, dpi=100)
    for column, model in enumerate(models):
        top, bottom = axes[0][column], axes[1][column]
        for result in (r for r in results if r["model"] == model):
            color = f"C{settings.index(result['setting'])}"
            validation = [r for r in result["records"] if r["kind"] == "validation"]
            steps = [r["step"] for r in validation]
            top.plot(steps, [r["answer_f1"] for r in validation], color=color, linestyle="-")
            top.plot(steps, [r["support_f1"] for r in validation], color=color, linestyle="--")
            top.plot(steps, [r["support_rank_f1"] for r in validation], color=color, linestyle=":")
            gradients = [r for r in result["records"] if r["kind"] == "gradient"]
            share = [
                r["support_encoder_grad_norm"] / (r["support_encoder_grad_norm"] + r["span_encoder_grad_norm"])
                for r in gradients
            ]
            attention, clipping = SETTINGS[result["setting"]]
            described = f"{result['setting']}: clip by {clipping}" + (f", GA {attention}" if model == "end2end" else "")
            bottom.plot([r["step"] for r in gradients], share, color=color, label=described)
        top.set_title(f"{model}: answer F1 (solid), support F1 (dashed), support rank F1 (dotted)", fontsize=9)
        top.set_xlabel("optimizer step")
        top.set_ylim(-0.02, 1.02)
        bottom.set_title(
            f"{model}: support's share of the encoder gradient norm (support / (support + span))", fontsize=9
        )
        bottom.set_xlabel("optimizer step")
        bottom.set_ylim(0, 1)
        bottom.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run (they come last)")
    parser.add_argument("--models", default="end2end,select_answer")
    parser.add_argument("--settings", default="official,former,official_ga_norm,former_ga_value")
    parser.add_argument("--steps", type=int, default=100, help="about this many optimizer steps per run")
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "logs" / "support_curves")
    parser.add_argument("--plot", type=Path, help="only draw the figure of an earlier curves.json")
    parser.add_argument("--figure", type=Path, help="where the figure goes (default: beside curves.json)")
    parser.add_argument("--run", type=Path, help="only score the support head of this trained run on its own split")
    args = parser.parse_args(argv)
    if args.run:
        print(json.dumps(support_on_evaluation_split(args.run), indent=1))
        return 0
    if args.plot:
        results = json.loads(args.plot.read_text())
        plot(results, args.figure or args.plot.with_name("curves.png"))
        return 0
    logging.basicConfig(level=logging.WARNING)
    out = args.out / f"{datetime.now():%Y-%m-%d_%H-%M-%S}"
    results = []
    for model in args.models.split(","):
        settings = args.settings.split(",")
        if model != "end2end":  # no global attention in windows: only the clipping differs
            settings = list(dict.fromkeys("official" if SETTINGS[s][1] == "value" else "former" for s in settings))
        for setting in settings:
            result = run(model, setting, args.steps, out, args.overrides)
            results.append(result)
            (out / "curves.json").write_text(json.dumps(results, indent=1) + "\n")
            last = [r for r in result["records"] if r["kind"] == "validation"][-1]
            print(
                f"{model} {setting}: answer F1 {result['final']['answer_f1']:.3f}, support F1 "
                f"{result['final']['support_f1']:.3f} (last validation: support rank F1 {last['support_rank_f1']:.3f}, "
                f"gold p {last['gold_support_probability']:.2f}, other p {last['other_support_probability']:.2f}), "
                f"{result['wall_s'] / 60:.1f} min",
                flush=True,
            )
    plot(results, args.figure or out / "curves.png")
    print(f"curves: {out / 'curves.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
