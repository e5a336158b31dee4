"""The names of the files and folders in a run folder, in one place: every module that writes or reads a run folder
takes them from here (docs/training.md, *The run folder*, describes each).

    <run>/config.yaml, status.json, provenance.json, predictions.jsonl, metrics.json, train.log,
          subsample_train_ids.json, wandb_run_id.txt, evaluations/<dataset>-<split>[-dire-<name>]/, errors.html
    <run>/<stage>/stage.json, checkpoints/{best,last}.ckpt, csv/version_<n>/metrics.csv
"""

from __future__ import annotations

# The run
CONFIG_FILE = "config.yaml"  # the resolved configuration (what a resume is checked against)
STATUS_FILE = "status.json"
PROVENANCE_FILE = "provenance.json"
PREDICTIONS_FILE = "predictions.jsonl"  # official MuSiQue prediction format
METRICS_FILE = "metrics.json"
LOG_FILE = "train.log"  # Hydra's job log (`hydra.job.name` is `train`)
WANDB_ID_FILE = "wandb_run_id.txt"
EVALUATIONS_FOLDER = "evaluations"  # `evaluate.py run=...` writes one folder per split and mode here
SCORING_FILE = "scoring.json"  # in each evaluations/ folder: what it predicted (dataset, split, sample, size, mode)
PAGE_FILE = "errors.html"  # the error browser

# A stage of the run, in `<run>/<stage>/`
STAGE_FILE = "stage.json"
CHECKPOINTS_FOLDER = "checkpoints"
BEST_FILE = "best.ckpt"  # the stage's best weights (weights only)
RESUME_FILE = "last.ckpt"  # the stage's resume point while it trains
# Written into the training stage's folder by the main process, read by every training process: under DDP the
# worker processes may not receive the signal themselves.
STOP_FILE = "stop_requested"

# What recipes write beside the predictions
RANKING_FILE = "selector_ranking.json"  # Select+Answer: the selector's ranking of the evaluation split
STEPS_FILE = "steps.jsonl"  # Step Execution: every executed step
DECOMPOSITIONS_FILE = "decompositions.jsonl"  # the decomposer's sub-questions
GENERATIONS_FILE = "generations.jsonl"  # generative readers: each row's raw generation and what its parse missed
EXEMPLARS_FILE = "prompt_exemplars.json"  # model=llm_prompt: the k-shot exemplars the run's prompts hold


def subsample_ids_file(split: str) -> str:
    """The file of the ids a split's subsample kept (`subsample_train_ids.json`)."""
    return f"subsample_{split}_ids.json"


def stage_ranking_file(split: str) -> str:
    """A selector stage's ranking of a split it ranked for its answerer (`ranking_train.json`)."""
    return f"ranking_{split}.json"
