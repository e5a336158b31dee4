"""The evaluator: one metrics implementation behind evaluate.py, the Lightning metrics and the benchmarks."""

from musique_models.evaluation.evaluator import evaluate_dire_files, evaluate_files, evaluate_predictions
from musique_models.evaluation.gold import GoldInstance, gold_from_example, read_gold
from musique_models.evaluation.metrics import aggregate, answer_scores, normalize_answer, support_scores
from musique_models.evaluation.predictions import Prediction, ProbePrediction, read_predictions, write_predictions

__all__ = [
    "GoldInstance",
    "Prediction",
    "ProbePrediction",
    "aggregate",
    "answer_scores",
    "evaluate_dire_files",
    "evaluate_files",
    "evaluate_predictions",
    "gold_from_example",
    "normalize_answer",
    "read_gold",
    "read_predictions",
    "support_scores",
    "write_predictions",
]
