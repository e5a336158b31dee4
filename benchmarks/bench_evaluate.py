"""Scoring speed and memory: 100,000 MuSiQue-Full predictions against a 100,000-instance gold file (~1.2 GB).

Side by side in one run, each in a fresh process: (1) a plain script that only parses both files with the
standard `json` module, (2) the evaluator (`evaluate_files` + `write_report`, what `evaluate.py` runs after
composing its config). Reports wall time and peak resident memory of each, and their ratios.

    python benchmarks/bench_evaluate.py [--instances 100000] [--keep-files DIR] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

WORDS = [
    "river",
    "city",
    "film",
    "born",
    "director",
    "album",
    "county",
    "team",
    "song",
    "war",
    "king",
    "company",
    "station",
    "school",
    "province",
    "village",
    "united",
    "state",
    "american",
    "british",
    "french",
    "german",
    "actor",
    "band",
    "released",
    "founded",
]

PARSE_ONLY = """
import json, resource, sys, time
start = time.perf_counter()
with open(sys.argv[1]) as handle:
    predictions = [json.loads(line) for line in handle if line.strip()]
with open(sys.argv[2]) as handle:
    gold = [json.loads(line) for line in handle if line.strip()]
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rows": len(gold)}))
"""

EVALUATOR = """
import json, resource, sys, time
from musique_models.evaluation.evaluator import evaluate_files, write_report
start = time.perf_counter()
report = evaluate_files(sys.argv[1], sys.argv[2])
write_report(report, sys.argv[3])
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rows": len(report.per_question), "answer_f1": report.metrics["answer_f1"],
                  "group_answer_sufficiency_f1": report.metrics["group_answer_sufficiency_f1"]}))
"""


def _paragraph(rng: random.Random, number: int, idx: int, supporting: bool) -> dict:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(66, 84)))
    return {"idx": idx, "title": f"Title {number} {idx}", "paragraph_text": text, "is_supporting": supporting}


def write_files(instances: int, folder: Path) -> tuple[Path, Path]:
    """A MuSiQue-Full gold jsonl (pairs: answerable then unanswerable) and predictions for it."""
    rng = random.Random(0)
    gold_path, predictions_path = folder / "gold.jsonl", folder / "predictions.jsonl"
    with open(gold_path, "w") as gold, open(predictions_path, "w") as predictions:
        for number in range(instances // 2):
            hops = (2, 2, 3, 4)[number % 4]
            support = rng.sample(range(20), hops)
            question_id = f"{hops}hop1__{number}_{number + 1}"
            for answerable in (True, False):
                kept = support if answerable else support[:-1]
                record = {
                    "id": question_id,
                    "paragraphs": [_paragraph(rng, number, idx, idx in kept) for idx in range(20)],
                    "question": "What is the " + " ".join(rng.choice(WORDS) for _ in range(12)) + "?",
                    "question_decomposition": [
                        {
                            "id": k,
                            "question": f"#{k} >> relation",
                            "answer": f"answer {k}",
                            "paragraph_support_idx": support[k] if answerable or k < hops - 1 else None,
                        }
                        for k in range(hops)
                    ],
                    "answer": f"answer {number}",
                    "answer_aliases": [f"alias {number}"],
                    "answerable": answerable,
                }
                gold.write(json.dumps(record) + "\n")
                predicted_answer = rng.choice([f"answer {number}", f"the answer {number} x", "wrong"])
                predictions.write(
                    json.dumps(
                        {
                            "id": question_id,
                            "predicted_answer": predicted_answer,
                            "predicted_support_idxs": sorted(rng.sample(range(20), 2)),
                            "predicted_answerable": rng.random() < 0.7,
                        }
                    )
                    + "\n"
                )
    return predictions_path, gold_path


def _measure(script: str, *args: str) -> dict:
    result = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=100_000)
    parser.add_argument("--keep-files", type=Path, help="write the synthetic files here and keep them")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep_files or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        predictions, gold = folder / "predictions.jsonl", folder / "gold.jsonl"
        if not (predictions.exists() and gold.exists()):
            predictions, gold = write_files(args.instances, folder)
        gold_gb = gold.stat().st_size / 1e9
        parse_only = _measure(PARSE_ONLY, str(predictions), str(gold))
        evaluator = _measure(EVALUATOR, str(predictions), str(gold), str(Path(scratch) / "metrics.json"))
    table = Table(title=f"Scoring {parse_only['rows']:,} MuSiQue-Full predictions, gold file {gold_gb:.2f} GB")
    for column in ["", "wall s", "peak MB"]:
        table.add_column(column, justify="right")
    table.add_row("parse both files with json (only)", f"{parse_only['seconds']:.2f}", f"{parse_only['peak_mb']:,.0f}")
    table.add_row(
        "musique_models evaluator (score + write)", f"{evaluator['seconds']:.2f}", f"{evaluator['peak_mb']:,.0f}"
    )
    table.add_row(
        "ratio evaluator / parse-only",
        f"{evaluator['seconds'] / parse_only['seconds']:.2f}x",
        f"{evaluator['peak_mb'] / parse_only['peak_mb']:.2f}x",
    )
    Console(width=120).print(table)
    results = {
        "gold_gb": gold_gb,
        "parse_only": parse_only,
        "evaluator": evaluator,
        "time_ratio": evaluator["seconds"] / parse_only["seconds"],
        "memory_ratio": evaluator["peak_mb"] / parse_only["peak_mb"],
    }
    print(json.dumps(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
