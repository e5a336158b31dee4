"""Training core: what `train.py` runs."""
