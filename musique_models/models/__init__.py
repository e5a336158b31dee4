"""Models: one LightningModule per file, all built on `backbone.py` and scored by `musique_models.evaluation`."""
