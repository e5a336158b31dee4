"""Score a prediction file against a gold file: `python evaluate.py predictions=PRED gold=GOLD output=OUT.json`."""

from __future__ import annotations

import sys

if __name__ != "__main__":
    # This script shares its name with Hugging Face's `evaluate` package. When the repository root is on sys.path
    # (a shell or test run from it), `import evaluate` finds this file first: hand that import over to the package.
    import importlib
    import os

    _here = os.path.dirname(os.path.abspath(__file__))
    _saved_path = list(sys.path)
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _here]
    del sys.modules[__name__]
    try:
        sys.modules[__name__] = importlib.import_module("evaluate")
    finally:
        sys.path[:] = _saved_path
else:
    import hydra
    from omegaconf import DictConfig

    import musique_models  # noqa: F401  (sets PROJECT_ROOT for the configs)
    from musique_models.cli.evaluate import evaluate
    from musique_models.errors import user_errors_exit

    @hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
    def main(cfg: DictConfig) -> dict[str, float]:
        with user_errors_exit():
            return evaluate(cfg)

    main()
