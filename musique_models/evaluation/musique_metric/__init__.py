"""Path of the local `evaluate` module: `evaluate.load(MODULE_PATH)`."""

from pathlib import Path

MODULE_PATH = str(Path(__file__).with_name("musique_metric.py"))
