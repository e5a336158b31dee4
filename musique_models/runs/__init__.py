"""Runs: a training run from its composed config to its scored predictions (`train`, the body of `train.py`), the
scoring of a finished run without training (`score.score_run`, the body of `evaluate.py run=`), and what a run
prints when it ends (`closing`), and a finished run in Python (`load_run`, `api`). Above the recipes, below the plan,
the report and the entry points; benchmarks drive runs through this layer."""

from musique_models.runs.api import Answer, ApiInputError, RunPredictor, load_run

__all__ = ["Answer", "ApiInputError", "RunPredictor", "load_run"]
