"""Entry points: the bodies of `train.py` and `evaluate.py`, kept in the package so that tests can call them.

The top layer: it may import every other layer, and nothing imports it.
"""
