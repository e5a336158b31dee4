"""What a run shows: rich tables on the console and the same text in its log file, and libraries kept quiet."""

from __future__ import annotations

import io
import logging
import os
import re
import warnings
from typing import Any

from rich.console import Console

log = logging.getLogger(__name__)


def show(console: Console, render: Any) -> None:
    """Print a rich table on the console and write the same text into the run's log file (`train.log`)."""
    recorder = Console(record=True, width=console.width, file=io.StringIO())
    render(recorder)
    render(console)
    write_to_log_file("\n" + recorder.export_text().rstrip())


def write_to_log_file(text: str, level: int = logging.INFO) -> None:
    """Write `text` as a record into the run's log files only (what the console already shows)."""
    record = logging.LogRecord(log.name, level, __file__, 0, "%s", (text,), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.emit(record)


# Warnings that say nothing actionable about a run: library deprecations, and Lightning's advice on workers, custom
# batch samplers (ours covers every row) and logging intervals longer than a tiny epoch. Literal message starts.
QUIET_WARNINGS = (
    "`isinstance(treespec",  # ", LeafSpec)` is deprecated" (a comma would break PYTHONWARNINGS)
    "The number of training batches",
    "You are using a custom batch sampler",
    "The '",  # "The 'train_dataloader' does not have many workers"
    "Total length of `list` across ranks is zero",  # a stage that does not validate has no validation loader
    "Checkpoint directory",  # "... exists and is not empty": a resumed stage's folder holds its resume point
)


def quiet_libraries() -> None:
    """Route warnings into the log, keep known noise out (here and in DDP worker processes, through
    PYTHONWARNINGS), and keep libraries' advertising and notices out of the console."""
    logging.captureWarnings(True)
    for name in (
        "pytorch_lightning.utilities.rank_zero",
        "lightning.pytorch.utilities.rank_zero",
        "lightning_fabric.utilities.rank_zero",
        "lightning.fabric.utilities.rank_zero",
    ):
        logging.getLogger(name).setLevel(logging.WARNING)
    for message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=re.escape(message))
    inherited = [os.environ["PYTHONWARNINGS"]] if os.environ.get("PYTHONWARNINGS") else []
    os.environ["PYTHONWARNINGS"] = ",".join(
        inherited + [f"ignore:{message}" for message in QUIET_WARNINGS if "," not in message and ":" not in message]
    )
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # "Loading weights" bars: the weights are local and load at once
