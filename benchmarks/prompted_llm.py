"""A prompted LLM on real held-out questions, side by side: `model=llm_prompt` (by default the offline
SmolLM2-135M-Instruct) zero-shot and k-shot, over all paragraphs and over a trained selector's top K, on the shipped
dev samples of each dataset, with the chance baseline beside it.

Each cell is one `train.py` run (in-process, as `train.py` would run it) on `--questions` dev questions (`eval_size`:
a seeded subset that keeps the hop mix), its k-shot exemplars drawn from the training sample (`--shots ''`: no
prompted cell). Per cell: answer F1 (An) and support F1 (Sp) with 95% percentile-bootstrap intervals over the questions
(`musique_models.evaluation.intervals`), on MuSiQue-Full also Sf, An+Sf and Sp+Sf; the share of generations the
parser could not read in full; generated tokens per second and all tokens (prompts too) per second; wall time.
Chance: the expected support F1 of naming as many paragraphs as the gold support, drawn at random, on the same
questions (k gold of n paragraphs: k / n); its answer F1 is 0. Q-only (the paper's question-only artifact baseline) is given by `--q-only`: it
trains `model=q_only` on the training sample and scores the same questions. `--finetune lora` (or `full`) adds the
generative reader (`model=generative_reader`, the same backbone) fine-tuned on the training sample with its default
settings and scored on the same questions, and the paired difference (fine-tuned minus each prompted cell, per
question, with its 95% paired-bootstrap interval) of its answer and support F1.

    python benchmarks/prompted_llm.py [--datasets musique_ans,hotpotqa_20k,2wiki_20k] [--shots 0,3] [--questions 100]
        [--selector musique_ans=RUN/selector/checkpoints/best.ckpt] [--top-k 5] [--contexts all,selector] [--q-only]
        [--finetune lora] [--out DIR] [-- OVERRIDES]

Results go to `--out` (default `logs/prompted_llm/<time>`): each cell's run folder, `results.json` and, with
`--finetune`, `paired.json`. Called again with the same `--out`, the cells it finished are read, not run again
(remove a cell's folder to run it again).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from datetime import datetime
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("WANDB_MODE", "offline")

from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.utils import instantiate  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from musique_models import PROJECT_ROOT  # noqa: E402
from musique_models.evaluation.chance import random_support_f1  # noqa: E402
from musique_models.evaluation.intervals import bootstrap_interval, paired_difference  # noqa: E402
from musique_models.io import write_json  # noqa: E402
from musique_models.run_files import CONFIG_FILE, GENERATION_SPEED_FILE, METRICS_FILE, PER_QUESTION_FILE  # noqa: E402
from musique_models.runs.train import train  # noqa: E402

PAIRED_METRICS = ("sufficiency_f1", "group_answer_sufficiency_f1", "group_support_sufficiency_f1")


def cell_folder(out: Path, dataset: str, model: list[str]) -> Path:
    return out / "-".join([dataset, *(item.split("=")[-1].replace("/", "_")[-24:] for item in model)])


def run_cell(dataset: str, model: list[str], questions: int, out: Path, extra: list[str]) -> Path:
    """One `train.py` run of `model` overrides on `questions` dev questions of `dataset`'s sample; its folder."""
    run_dir = cell_folder(out, dataset, model)
    overrides = [
        *model,
        f"dataset={dataset}",
        "dataset.sample=true",
        f"eval_size={questions}",
        "logger=none",
        "trainer.enable_progress_bar=false",
        f"paths.output_dir={run_dir}",
        *extra,
    ]
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    train(cfg)
    return run_dir


def paragraph_counts_of(run_dir: Path) -> dict[str, int]:
    """Each evaluated question's paragraph count, from the run's dataset and split."""
    cfg = OmegaConf.load(run_dir / CONFIG_FILE)
    evaluation = instantiate(cfg.dataset).load(cfg.eval_split)
    return dict(zip(evaluation["id"], (len(p) for p in evaluation["paragraphs"]), strict=True))


def cell_figures(run_dir: Path, wall_s: float, paragraph_counts: dict[str, int] | None = None) -> dict:
    """A finished cell's figures: metrics with intervals, the chance support F1 on its questions, the unparsed share,
    speed, wall time."""
    metrics = json.loads((run_dir / METRICS_FILE).read_text())
    rows = [json.loads(line) for line in (run_dir / PER_QUESTION_FILE).read_text().splitlines()]
    answered = [row for row in rows if "answer" in row["counts_toward"]]
    paragraph_counts = paragraph_counts or paragraph_counts_of(run_dir)
    figures = {
        "questions": len(rows),
        "answer_f1": bootstrap_interval([row["answer_f1"] for row in answered]).__dict__,
        "support_f1": bootstrap_interval([row["support_f1"] for row in answered]).__dict__,
        "chance_support_f1": chance_support_f1(answered, paragraph_counts),
        **{name: metrics[name] for name in PAIRED_METRICS if name in metrics},
        "unparsed_share": metrics.get("unparsed_generations", 0.0) / max(len(rows), 1),
        "wall_s": round(wall_s, 1),
    }
    speed_file = run_dir / GENERATION_SPEED_FILE
    if speed_file.exists():
        speed = json.loads(speed_file.read_text())
        figures["generated_tokens_per_s"] = round(speed["generated_tokens"] / speed["seconds"], 2)
        figures["tokens_per_s"] = round((speed["prompt_tokens"] + speed["generated_tokens"]) / speed["seconds"], 1)
        figures["prompt_tokens_per_question"] = round(speed["prompt_tokens"] / speed["questions"])
    return figures


def chance_support_f1(rows: list[dict], paragraph_counts: dict[str, int]) -> float:
    """The expected support F1 of naming as many paragraphs as the gold support, drawn at random from the question's
    paragraphs (`random_support_f1`: k gold of n paragraphs, k / n), averaged over the questions."""
    scores = [random_support_f1(len(row["gold_support_idxs"]), paragraph_counts[row["id"]]) for row in rows]
    return sum(scores) / max(len(scores), 1)


def per_question_scores(run_dir: Path) -> dict[str, dict]:
    """A finished cell's per-question rows that count toward the answer metrics, by question id."""
    rows = [json.loads(line) for line in (run_dir / PER_QUESTION_FILE).read_text().splitlines()]
    return {row["id"]: row for row in rows if "answer" in row["counts_toward"]}


def paired_figures(first: Path, second: Path) -> dict:
    """`first` minus `second` on the questions both scored: answer and support F1, each with its paired interval."""
    first_rows, second_rows = per_question_scores(first), per_question_scores(second)
    if first_rows.keys() != second_rows.keys():
        raise ValueError(
            f"{first} and {second} scored different questions ({len(first_rows.keys() - second_rows.keys())} and "
            f"{len(second_rows.keys() - first_rows.keys())} of their own): a paired difference needs the same ones"
        )
    shared = sorted(first_rows)
    return {
        "questions": len(shared),
        **{
            metric: paired_difference(
                [first_rows[qid][metric] for qid in shared], [second_rows[qid][metric] for qid in shared]
            ).__dict__
            for metric in ("answer_f1", "support_f1")
        },
    }


def kept_rows(earlier: dict[str, dict], results: list[dict]) -> list[dict]:
    """The rows of an earlier call with the same `--out` whose cells this call does not have: results.json keeps
    them (a call that adds cells does not drop the cells measured before)."""
    now = {row["run"] for row in results}
    return [row for run, row in earlier.items() if run not in now]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--datasets", default="musique_ans,hotpotqa_20k,2wiki_20k", help="dataset configs, by comma")
    parser.add_argument("--shots", default="0,3", help="k of each prompted cell, by comma ('': no prompted cell)")
    parser.add_argument("--questions", type=int, default=100, help="dev questions of each sample (eval_size)")
    parser.add_argument(
        "--selector", action="append", default=[], help="DATASET=PATH of a trained selector's best.ckpt (repeatable)"
    )
    parser.add_argument("--top-k", type=int, default=5, help="paragraphs a selector cell reads")
    parser.add_argument(
        "--contexts",
        default="all,selector",
        help="what the prompted cells read: 'all' paragraphs, a 'selector' top K (where --selector names one)",
    )
    parser.add_argument("--q-only", action="store_true", help="train model=q_only on each sample beside")
    parser.add_argument(
        "--finetune", choices=("lora", "full"), help="add the generative reader fine-tuned on each training sample"
    )
    parser.add_argument("--out", type=Path, help="folder of the cells and results; None: logs/prompted_llm/TIME")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every cell (after --)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    out = args.out or PROJECT_ROOT / "logs" / "prompted_llm" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    selectors = dict(item.split("=", 1) for item in args.selector)
    results_file = out / "results.json"
    # a cell finished by an earlier call with this --out is read again, not run (remove its folder to run it again)
    earlier = {row["run"]: row for row in json.loads(results_file.read_text())} if results_file.exists() else {}
    results, paired = [], []
    for dataset in args.datasets.split(","):
        contexts = [("all paragraphs", [])] if "all" in args.contexts.split(",") else []
        if dataset in selectors and "selector" in args.contexts.split(","):
            contexts.append(
                (
                    f"selector top {args.top_k}",
                    [f"model.selector_checkpoint={selectors[dataset]}", f"model.top_k={args.top_k}"],
                )
            )
        cells = [
            (f"{shots}-shot, {context}", ["model=llm_prompt", f"model.shots={shots}", *settings])
            for shots in (int(value) for value in args.shots.split(",") if value)
            for context, settings in contexts
        ]
        prompted = len(cells)
        if args.finetune:
            cells.append(
                (
                    f"{args.finetune} fine-tuned on the training sample",
                    ["model=generative_reader", f"model.reader.finetune={args.finetune}"],
                )
            )
        if args.q_only:
            cells.append(("Q-only (trained on the sample)", ["model=q_only"]))
        for name, model in cells:
            run_dir = cell_folder(out, dataset, model)
            if str(run_dir) in earlier and (run_dir / METRICS_FILE).exists():
                print(f"{name}: read from {run_dir}, finished by an earlier call")
                wall_s = earlier[str(run_dir)]["wall_s"]
            else:
                start = time.perf_counter()
                run_cell(dataset, model, args.questions, out, args.overrides)
                wall_s = time.perf_counter() - start
            results.append({"dataset": dataset, "cell": name, "run": str(run_dir), **cell_figures(run_dir, wall_s)})
            write_json(results_file, [*kept_rows(earlier, results), *results])
        if args.finetune:
            finetuned = results[-len(cells) + prompted]
            for cell in results[-len(cells) : -len(cells) + prompted]:
                paired.append(
                    {
                        "dataset": dataset,
                        "first": finetuned["cell"],
                        "second": cell["cell"],
                        **paired_figures(Path(finetuned["run"]), Path(cell["run"])),
                    }
                )
            write_json(out / "paired.json", paired)

    results = [*kept_rows(earlier, results), *results]
    table = Table(
        title=f"Prompted LLM on {args.questions} dev questions of each shipped sample (95% bootstrap intervals)"
    )
    for column in ("dataset", "cell", "An", "Sp", "chance Sp", "unparsed", "gen tok/s", "tok/s", "wall"):
        table.add_column(column)
    for row in results:
        an, sp = row["answer_f1"], row["support_f1"]
        table.add_row(
            row["dataset"],
            row["cell"],
            f"{an['mean'] * 100:.1f} [{an['low'] * 100:.1f}, {an['high'] * 100:.1f}]",
            f"{sp['mean'] * 100:.1f} [{sp['low'] * 100:.1f}, {sp['high'] * 100:.1f}]",
            f"{row['chance_support_f1'] * 100:.1f}",
            f"{row['unparsed_share'] * 100:.0f}%",
            str(row.get("generated_tokens_per_s", "")),
            str(row.get("tokens_per_s", "")),
            f"{row['wall_s']:.0f} s",
        )
    console = Console(width=200)
    console.print(table)
    if paired:
        differences = Table(title="Fine-tuned minus prompted, on the same questions (95% paired bootstrap intervals)")
        for column in ("dataset", "fine-tuned", "minus", "questions", "An difference", "Sp difference"):
            differences.add_column(column)
        for row in paired:
            differences.add_row(
                row["dataset"],
                row["first"],
                row["second"],
                str(row["questions"]),
                *(
                    f"{row[metric]['mean'] * 100:+.1f} [{row[metric]['low'] * 100:+.1f}, {row[metric]['high'] * 100:+.1f}]"
                    for metric in ("answer_f1", "support_f1")
                ),
            )
        console.print(differences)
    print(f"results: {out / 'results.json'}")
    return {"results": results, "paired": paired}


if __name__ == "__main__":
    main()
