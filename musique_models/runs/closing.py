"""What a finished run says below its metrics: what the figures cannot show (predictions that are the same for every
question), and, for a run on a shipped sample, what the run was, what its selector's ranking shows against chance,
and the commands that come next."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from musique_models import PROJECT_ROOT
from musique_models.run_files import PER_QUESTION_FILE, RANKING_FILE

# Under this many questions a recall beside chance is not said to be above it or not.
FEW_QUESTIONS = 30


def ranking_against_chance(run_dir: Path) -> str | None:
    """`the selector put 41% of the supporting paragraphs in its top 7; a random ranking puts 35% there`, from the
    run's ranking file (`selector_ranking.json`): its recall@K beside the recall@K of a random ranking of the same
    questions (K of each question's n paragraphs: K/n of its support). None when the run wrote no labelled ranking."""
    path = run_dir / RANKING_FILE
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    top_k, metrics, rankings = record.get("top_k"), record.get("metrics") or {}, record.get("rankings") or []
    recall = metrics.get(f"recall_at_{top_k}")
    if not top_k or recall is None or not rankings:
        return None
    chance = sum(min(top_k, len(row["ranking"])) / len(row["ranking"]) for row in rankings) / len(rankings)
    questions = len({row["id"] for row in rankings})
    if questions < FEW_QUESTIONS:
        verdict = f"{questions} questions are too few to tell"
    else:
        verdict = "above chance" if recall > chance + 0.05 else "not clearly above chance"
    return (
        f"the selector put {100 * recall:.0f}% of the supporting paragraphs in its top {top_k}; a random ranking puts "
        f"{100 * chance:.0f}% there ({verdict})"
    )


def sample_run_lines(cfg: Any, run_dir: Path, train_questions: int, eval_questions: int) -> list[str]:
    """For a run on a shipped sample: it is a pipeline check, what its ranking shows, and what to run next."""
    run = shlex.quote(str(run_dir))
    python = shlex.quote(sys.executable)  # this run's interpreter: the commands work where no environment is active
    evaluate = shlex.quote(str(PROJECT_ROOT / "evaluate.py"))
    if any(run_dir.glob("*/stage.json")):  # a stage was trained
        lines = [
            f"This run is a pipeline check on the shipped {cfg.dataset.name} sample ({train_questions} training "
            f"questions, {eval_questions} {cfg.eval_split} questions scored): figures this small show that the "
            "pipeline runs end to end, not how good the model is (the paper trains on about 20,000 questions).",
        ]
    else:
        lines = [
            f"Nothing was trained: the model answered {eval_questions} {cfg.eval_split} questions of the shipped "
            f"{cfg.dataset.name} sample as it is; on so few questions a figure can move by several points (see "
            f"{PER_QUESTION_FILE} for each question's scores).",
        ]
    ranking = ranking_against_chance(run_dir)
    if ranking is not None:
        lines.append(ranking[0].upper() + ranking[1:] + ".")
    lines += [
        "Next:",
        f"  {python} {evaluate} run={run}  # predict and score a split (mode=dire: DiRe probes)",
        f"  {python} -m musique_models.report {run}  # the report, beside the paper's figures",
        f"  {python} -m musique_models.report.browse {run}  # the error browser (errors.html in the run folder)",
    ]
    return lines
