"""The paper's selector against Beam Retrieval, side by side in one run, on the shipped MuSiQue-Ans sample.

Same encoder (the real offline MiniLM, `backbone=minilm`), the same training questions (the sample's 100), the same
number of optimizer steps (`--epochs` over them at one question a step, no gradient accumulation: each stage's
`stage.json` is checked for it), the same learning rate (MiniLM's 1e-4), no validation (the final weights rank):

- the paper's selector (`model=select_answer`'s first stage): each `question SEP paragraph` scored alone (300-token
  texts), a question's gold paragraphs and as many negatives a step. Its support: its top K (K = 7, the paper's on
  MuSiQue), its top h (h = the hops the question's type states, the number Beam Retrieval chains), and the
  paragraphs above the score threshold that maximises support F1 over these dev questions (tuned on the questions it
  is scored on: an upper bound of any threshold);
- Beam Retrieval (`model=beam_select_answer`'s first stage) with beam 1, 2 and 4, `--max-length` tokens a hop input
  (256, the sample default; the authors' 512 costs ~2x on CPU): its chain is its support.

Per system, over the first `--dev-questions` dev questions: support F1, exact chain match (the predicted set equals
the gold set) and recall of the gold paragraphs, wall time of training, and prediction time per question
(featurisation included, batches of `--batch-size` questions). Both go through the recipes' own code
(`SelectAnswer._fit_selector` / `BeamSelectAnswer._fit_selector` and their rankers).

    python benchmarks/bench_selectors.py --json selectors.json
    python benchmarks/bench_selectors.py --epochs 1 --dev-questions 40 --beams 1,2   # a quicker look

Run it alone on the machine: the timings are wall times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")

import datasets  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.utils import instantiate  # noqa: E402
from omegaconf import DictConfig  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from musique_models import PROJECT_ROOT  # noqa: E402
from musique_models.evaluation.metrics import support_scores  # noqa: E402
from musique_models.features.beam import hop_count  # noqa: E402
from musique_models.models.selector import rank_paragraphs  # noqa: E402
from musique_models.recipes.base import RunContext  # noqa: E402
from musique_models.recipes.build import instantiate_recipe  # noqa: E402

PAPER_K = 7


def compose_cfg(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides)


def stage_overrides(epochs: int, backbone: str) -> list[str]:
    """Either first stage: `epochs` over the training questions at one question a step, lr 1e-4, no validation."""
    return [
        f"backbone={backbone}",
        "dataset=musique_ans",
        "dataset.sample=true",
        "trainer=cpu",
        "++trainer.threads=2",
        "trainer.enable_progress_bar=false",
        "callbacks=none",
        "logger=none",
        f"model.selector.max_epochs={epochs}",
        "model.selector.lr=1e-4",
        "model.selector.micro_batch_size=1",
        "model.selector.accumulate_grad_batches=1",
        "model.selector.validate=false",
    ]


def chain_scores(predicted: list[list[int]], gold: list[list[int]]) -> dict[str, float]:
    """Mean support F1, exact match (as sets) and recall of the gold paragraphs over questions."""
    f1 = [support_scores(p, g).f1 for p, g in zip(predicted, gold, strict=True)]
    exact = [float(set(p) == set(g)) for p, g in zip(predicted, gold, strict=True)]
    recall = [len(set(p) & set(g)) / len(g) for p, g in zip(predicted, gold, strict=True)]
    return {
        "support_f1": statistics.fmean(f1),
        "chain_exact_match": statistics.fmean(exact),
        "gold_recall": statistics.fmean(recall),
    }


def best_threshold(scored: list[list[tuple[float, int]]], gold: list[list[int]]) -> tuple[float, list[list[int]]]:
    """The score threshold whose support (paragraphs scoring at least it; the top one when none does) has the best
    mean support F1 over the questions, and that support."""

    def support_at(threshold: float) -> list[list[int]]:
        return [[idx for score, idx in pairs if score >= threshold] or [pairs[0][1]] for pairs in scored]

    candidates = sorted({score for pairs in scored for score, _ in pairs})
    best = max(candidates, key=lambda t: chain_scores(support_at(t), gold)["support_f1"])
    return best, support_at(best)


def timed(function: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def fit_first_stage(model: str, overrides: list[str], train: datasets.Dataset, dev: datasets.Dataset, out: Path):
    """The recipe's first stage fitted on `train` (run folder `out`), with its wall time and optimizer steps."""
    cfg = compose_cfg([f"model={model}", *overrides, f"paths.cache_dir={out}/cache", f"paths.output_dir={out}"])
    torch.manual_seed(int(cfg.seed))
    recipe = instantiate_recipe(cfg)
    source = instantiate(cfg.dataset)
    context = RunContext(cfg, source, train, dev, [], out, [])
    fitted, seconds = timed(lambda: recipe._fit_selector(context, "selector"))
    steps = json.loads((out / "selector" / "stage.json").read_text())["global_step"]
    return cfg, fitted, seconds, steps


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    torch.set_num_threads(2)
    cfg = compose_cfg(["dataset=musique_ans", "dataset.sample=true"])
    source = instantiate(cfg.dataset)
    train = source.load("train").select(range(args.train_questions))
    dev = source.load("dev").select(range(args.dev_questions))
    gold = [[p["idx"] for p in row["paragraphs"] if p["is_supporting"]] for row in dev]
    hops = [hop_count(kind) for kind in dev["question_type"]]
    results: dict[str, Any] = {
        "train_questions": len(train),
        "dev_questions": len(dev),
        "epochs": args.epochs,
        "max_length": args.max_length,
        "systems": {},
    }
    root = Path(args.out or tempfile.mkdtemp(prefix="bench_selectors-"))

    # the paper's selector
    cfg_sa, selector, train_seconds, steps = fit_first_stage(
        "select_answer", stage_overrides(args.epochs, args.backbone), train, dev, root / "paper_selector"
    )
    ranker = selector.ranker(cfg_sa, args.batch_size * 20)  # pairs a batch: as many questions as the beam's
    (rankings, columns), predict_seconds = timed(lambda: ranker.rank(dev))
    by_row = rank_paragraphs(
        columns["example_row"].tolist(), columns["paragraph_idx"].tolist(), columns["score"].tolist()
    )
    score_of = {
        (int(r), int(i)): float(s)
        for r, i, s in zip(columns["example_row"], columns["paragraph_idx"], columns["score"], strict=True)
    }
    scored = [[(score_of[(row, idx)], idx) for idx in by_row[row]] for row in range(len(dev))]
    threshold, thresholded = best_threshold(scored, gold)
    common = {
        "train_seconds": train_seconds,
        "optimizer_steps": steps,
        "predict_seconds_per_question": predict_seconds / len(dev),
    }
    results["systems"][f"paper selector, top {PAPER_K}"] = {
        **chain_scores([ranking[:PAPER_K] for ranking in rankings], gold),
        **common,
    }
    results["systems"]["paper selector, top h"] = {
        **chain_scores([ranking[:h] for ranking, h in zip(rankings, hops, strict=True)], gold),
        **common,
    }
    results["systems"]["paper selector, best threshold"] = {
        **chain_scores(thresholded, gold),
        "threshold": threshold,
        **common,
    }
    console.print(f"paper selector: {steps} steps, {train_seconds:.0f} s")

    for beam in args.beams:
        overrides = [
            *stage_overrides(args.epochs, args.backbone),
            f"model.selector.beam_size={beam}",
            f"model.selector.max_length={args.max_length}",
            "model.selector.rows_per_forward=16",
        ]
        cfg_beam, retriever, train_seconds, steps = fit_first_stage(
            "beam_select_answer", overrides, train, dev, root / f"beam_{beam}"
        )
        ranker = retriever.ranker(cfg_beam, args.batch_size)
        (chains, _), predict_seconds = timed(lambda ranker=ranker: ranker.rank(dev))
        results["systems"][f"Beam Retrieval, beam {beam}"] = {
            **chain_scores(chains, gold),
            "train_seconds": train_seconds,
            "optimizer_steps": steps,
            "predict_seconds_per_question": predict_seconds / len(dev),
        }
        console.print(f"beam {beam}: {steps} steps, {train_seconds:.0f} s")
    step_counts = {name: system["optimizer_steps"] for name, system in results["systems"].items()}
    if len(set(step_counts.values())) != 1:
        raise SystemExit(f"the systems took different numbers of optimizer steps: {step_counts}")
    return results


def results_table(results: dict[str, Any]) -> Table:
    table = Table(
        title=f"first stages on {results['dev_questions']} MuSiQue-Ans dev questions "
        f"({results['train_questions']} training questions, {results['epochs']} epoch(s))"
    )
    for column in ("system", "support F1", "exact chain", "gold recall", "steps", "train (s)", "predict (s/question)"):
        table.add_column(column, justify="left" if column == "system" else "right")
    for name, system in results["systems"].items():
        table.add_row(
            name,
            f"{system['support_f1']:.3f}",
            f"{system['chain_exact_match']:.3f}",
            f"{system['gold_recall']:.3f}",
            str(system["optimizer_steps"]),
            f"{system['train_seconds']:.0f}",
            f"{system['predict_seconds_per_question']:.3f}",
        )
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-questions", type=int, default=100)
    parser.add_argument("--dev-questions", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--beams", type=lambda text: [int(b) for b in text.split(",")], default=[1, 2, 4])
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--backbone", default="minilm", help="the encoder of both (tests: tiny)")
    parser.add_argument("--batch-size", type=int, default=8, help="questions per prediction batch")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--out", help="folder of the stages' runs (default: a new temporary folder)")
    args = parser.parse_args(argv)
    console = Console()
    results = run(args, console)
    console.print(results_table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
