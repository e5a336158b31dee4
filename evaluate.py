"""Score a prediction file against a gold file: `python evaluate.py predictions=PRED gold=GOLD [output=OUT.json]
[dataset=NAME | format=FORMAT]`; conf/evaluate.yaml lists every option."""

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
    import os

    import hydra
    from omegaconf import DictConfig

    import musique_models  # noqa: F401  (sets PROJECT_ROOT for the configs)
    from musique_models.errors import user_errors_exit

    # Hydra then raises config errors instead of printing them over several lines: user_errors_exit prints one.
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")

    @hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
    def main(cfg: DictConfig) -> dict[str, float]:
        from musique_models.cli.evaluate import evaluate  # the evaluator loads only once the config has composed

        # Inside the job too: Hydra writes "Error executing job with overrides: ..." before re-raising a job's error.
        with user_errors_exit():
            return evaluate(cfg)

    with user_errors_exit(config_name="evaluate"):  # composition errors: a bad override, an unknown dataset=
        main()
