"""Sweeps: the paper's grid as one multirun (`experiment=paper_grid`: every system's `paper_experiments` in the registry, one job each;
`experiment=paper_grid_tiny`: the same grid on tiny backbones, run here) and the Optuna search over Select+Answer's
learning rates and K (`hparams_search=select_answer_optuna`, two trials run here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from musique_models import PROJECT_ROOT
from musique_models.systems import registry
from tests.conftest import ONE_THREAD, run_python

# The paper's grid, from the registry: each system's `paper_experiments` (experiment config -> model config).
PAPER_EXPERIMENTS = {
    experiment: model for model, system in registry().items() for experiment in system.paper_experiments
}


def _sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """The jobs' overrides that Hydra's basic sweeper makes of `python train.py --multirun OVERRIDES`."""
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    params = [f"{key}={value}" for key, value in (cfg.hydra.sweeper.params or {}).items()]
    parsed = OverridesParser.create().parse_overrides([*params, *overrides])
    (jobs,) = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return jobs


def test_the_paper_grid_lists_every_system_of_the_tables_once() -> None:
    jobs = _sweep_jobs(["experiment=paper_grid"])
    systems = [next(o.split("=", 1)[1] for o in job if o.startswith("+experiment@_global_=")) for job in jobs]
    assert sorted(systems) == sorted(PAPER_EXPERIMENTS)  # once each
    for experiment, model in PAPER_EXPERIMENTS.items():  # each file sets the model that lists it, and a dataset
        defaults = yaml.safe_load((PROJECT_ROOT / "conf" / "experiment" / f"{experiment}.yaml").read_text())["defaults"]
        overrides = {key: value for entry in defaults if isinstance(entry, dict) for key, value in entry.items()}
        assert overrides["override /model"] == model, experiment
        assert experiment.endswith(f"_{overrides['override /dataset']}"), experiment
    assert not [e for e, model in PAPER_EXPERIMENTS.items() if model == "step_execution" and "hotpotqa" in e]
    shipped = {path.stem for path in (PROJECT_ROOT / "conf" / "experiment").glob("*.yaml")}
    assert shipped - set(systems) == {"decomposer_musique", "decomposer_2wiki", "paper_grid", "paper_grid_tiny"}


@pytest.mark.slow
def test_the_tiny_paper_grid_runs_every_system_in_one_multirun(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "grid"
    result = run_python(
        [
            "train.py",
            "--multirun",
            "experiment=paper_grid_tiny",
            ONE_THREAD,
            f"hydra.sweep.dir={sweep_dir}",
            f"paths.cache_dir={tmp_path}/cache",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = sorted((path for path in sweep_dir.iterdir() if path.is_dir()), key=lambda p: int(p.name.split("_")[0]))
    assert len(jobs) == len(PAPER_EXPERIMENTS)
    cells = set()
    for job in jobs:
        assert json.loads((job / "status.json").read_text())["status"] == "finished", job.name
        assert "answer_f1" in json.loads((job / "metrics.json").read_text()), job.name
        config = OmegaConf.load(job / "config.yaml")
        assert job.name == f"{job.name.split('_')[0]}_{config.experiment_name}"
        components = [key for key in ("selector", "answerer", "reader", "decomposer") if key in config.model]
        assert all(config.model[key].backbone.name.startswith("tiny") for key in components), job.name
        # an experiment is `<system>_<dataset>`, on the model that lists it
        assert config.experiment_name.endswith(f"_{config.dataset.name}"), job.name
        cells.add((config.experiment_name, config.model.name, config.dataset.name))
    assert {(experiment, model) for experiment, model, _ in cells} == set(PAPER_EXPERIMENTS.items())
    assert not any(model == "step_execution" and dataset == "hotpotqa_20k" for _, model, dataset in cells)


@pytest.mark.slow
def test_two_optuna_trials_of_the_select_answer_search(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "search"
    result = run_python(
        [
            "train.py",
            "--multirun",
            "hparams_search=select_answer_optuna",
            "hydra.sweeper.n_trials=2",
            "backbone=tiny",
            "trainer=cpu",
            "dataset.sample=true",
            "dataset.train_size=6",
            "eval_size=3",
            "trainer.fast_dev_run=true",
            "trainer.enable_progress_bar=false",
            ONE_THREAD,
            "logger=none",
            f"hydra.sweep.dir={sweep_dir}",
            f"paths.cache_dir={tmp_path}/cache",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    trials = sorted(path for path in sweep_dir.iterdir() if path.is_dir())
    assert [path.name for path in trials] == ["0", "1"]  # short job folders; each keeps its overrides
    for trial in trials:
        overrides = json.loads((trial / "provenance.json").read_text())["overrides"]
        assert "backbone=tiny" in overrides and any(o.startswith("model.selector.lr=") for o in overrides)
    assert all(json.loads((trial / "status.json").read_text())["status"] == "finished" for trial in trials)
    best = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    params = best["best_params"]
    assert set(params) == {"model.selector.lr", "model.answerer.lr", "model.top_k"}
    assert 1e-5 <= params["model.selector.lr"] <= 3e-4 and 1e-5 <= params["model.answerer.lr"] <= 3e-4
    assert params["model.top_k"] in (3, 5, 7)
    # the best value is a trial's answer F1, and that trial ran with the best parameters
    matching = []
    for trial in trials:
        config = OmegaConf.load(trial / "config.yaml")
        ran = {key: OmegaConf.select(config, key) for key in params}
        if ran == params and json.loads((trial / "metrics.json").read_text())["answer_f1"] == best["best_value"]:
            matching.append(trial.name)
    assert matching
