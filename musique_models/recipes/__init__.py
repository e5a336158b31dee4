"""Recipes: what `model=<name>` instantiates. A recipe featurises the data, fits its stages, ranks and predicts;
it is not a model (`musique_models.models` holds the LightningModules). One recipe per file."""
