"""Data-layer throughput: parse + Arrow cache, and cached re-load, for 20,000 synthetic questions per format.

Side by side in one run, per format: a plain `json` parse of the same file (the floor any reader pays), the
first load through `DatasetSource` (parse, validate, write Arrow), and the cached re-load.

    python benchmarks/bench_data.py [--questions 20000] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from musique_models.data.jsonio import iter_json_records
from musique_models.data.source import DatasetSource

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
    "river",
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


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def _paragraph_text(rng: random.Random) -> str:
    return " ".join(_sentence(rng, 14) for _ in range(5))


def musique_record(rng: random.Random, number: int, answerable: bool = True) -> dict:
    hops = (2, 2, 3, 4)[number % 4]
    support = rng.sample(range(20), hops)
    return {
        "id": f"{hops}hop__{number}",
        "question": _sentence(rng, 12),
        "answer": "answer",
        "answer_aliases": ["alias"],
        "answerable": answerable,
        "paragraphs": [
            {
                "idx": i,
                "title": f"Title {number} {i}",
                "paragraph_text": _paragraph_text(rng),
                "is_supporting": answerable and i in support,
            }
            for i in range(20)
        ],
        "question_decomposition": [
            {
                "id": k,
                "question": f"#{k} >> relation" if k else "sub question",
                "answer": f"a{k}",
                "paragraph_support_idx": support[k] if answerable else None,
            }
            for k in range(hops)
        ],
    }


def context_record(rng: random.Random, number: int, with_evidences: bool) -> dict:
    titles = [f"Title {number} {i}" for i in range(10)]
    record = {
        "_id": f"{number:024x}",
        "question": _sentence(rng, 12),
        "answer": "answer",
        "type": "bridge",
        "level": "hard",
        "context": [[title, [" " + _sentence(rng, 14) for _ in range(4)]] for title in titles],
        "supporting_facts": [[titles[1], 0], [titles[4], 1]],
    }
    if with_evidences:
        record["evidences"] = [[titles[1], "director", titles[4]], [titles[4], "place of birth", "answer"]]
    return record


def write_synthetic(kind: str, questions: int, folder: Path) -> Path:
    rng = random.Random(0)
    if kind in ("musique_ans", "musique_full"):
        path = folder / f"{kind}.jsonl"
        with open(path, "w") as handle:
            for number in range(questions):
                flags = [True, False] if kind == "musique_full" else [True]
                for answerable in flags:
                    handle.write(json.dumps(musique_record(rng, number, answerable)) + "\n")
        return path
    path = folder / f"{kind}.json"
    records = [context_record(rng, number, with_evidences=kind == "2wiki") for number in range(questions)]
    path.write_text(json.dumps(records))
    return path


def _timed(function: Callable[[], object]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def _plain_json(path: Path) -> None:
    if path.suffix == ".json":
        json.loads(path.read_text())
    else:
        [json.loads(line) for line in path.read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=20_000)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    formats = {"musique_ans": "musique", "musique_full": "musique", "hotpotqa": "hotpotqa", "2wiki": "2wiki"}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for kind, data_format in formats.items():
            path = write_synthetic(kind, args.questions, Path(folder))
            source = DatasetSource(
                name=kind,
                display_name=kind,
                format=data_format,
                files={"train": str(path)},
                data_dir="/",
                cache_dir=f"{folder}/cache",
                paired=kind == "musique_full",
            )
            json_seconds = _timed(lambda path=path: _plain_json(path))
            records_seconds = _timed(lambda path=path: sum(1 for _ in iter_json_records(path)))
            first_seconds = _timed(lambda source=source: source.load("train"))
            cached_seconds = _timed(lambda source=source: source.load("train"))
            rows.append(
                {
                    "format": kind,
                    "questions": args.questions,
                    "file_mb": path.stat().st_size / 1e6,
                    "json_only_s": json_seconds,
                    "record_iterator_s": records_seconds,
                    "parse_and_cache_s": first_seconds,
                    "cached_reload_s": cached_seconds,
                    "parse_and_cache_questions_per_s": args.questions / first_seconds,
                    "cached_reload_questions_per_s": args.questions / cached_seconds,
                    "parse_and_cache_vs_json_only": first_seconds / json_seconds,
                }
            )
    table = Table(title=f"Data layer, {args.questions:,} synthetic questions per format (1 process)")
    for column in [
        "format",
        "file MB",
        "json only s",
        "parse+cache s",
        "parse+cache q/s",
        "x json only",
        "cached reload s",
        "cached reload q/s",
    ]:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            row["format"],
            f"{row['file_mb']:.0f}",
            f"{row['json_only_s']:.2f}",
            f"{row['parse_and_cache_s']:.2f}",
            f"{row['parse_and_cache_questions_per_s']:,.0f}",
            f"{row['parse_and_cache_vs_json_only']:.1f}x",
            f"{row['cached_reload_s']:.3f}",
            f"{row['cached_reload_questions_per_s']:,.0f}",
        )
    Console(width=160).print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
