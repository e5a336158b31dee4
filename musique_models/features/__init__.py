"""Featurisation: turn examples in the internal schema into model inputs (batched, cached `datasets.map`)."""
