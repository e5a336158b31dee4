"""The plan of an experiment: its jobs (one for a system, every system's `paper_experiments` for
`experiment=paper_grid`), each job's stages, and for each stage what it computes: a `Component` (an architecture
at one input shape and batch, training or predicting), the examples it reads, its batch, its epochs and its steps.

Each job's recipe counts its own stages (`plan(cfg, splits)`, a class method of the recipe its config names;
`musique_models/recipes/planning.py` holds the vocabulary and the stages the recipes share) from the job's composed
config and the `PlanSplits` this module derives from the dataset config's `official` counts (the official files'
split sizes, paragraphs per question and supporting paragraphs, which no sample holds). Every count is an upper
bound: each input is taken at its token cap and every epoch validates. Reading a recipe's `plan` imports its module,
and with it torch: planning the whole grid takes about 13 s on 2 cores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from musique_models import PROJECT_ROOT
from musique_models.recipes.planning import (
    BEAM_QUESTION_TOKENS,
    BEAM_RETRIEVER,
    KINDS,
    PREDICT,
    READER,
    SELECTOR,
    SEQ2SEQ,
    TRAIN,
    Component,
    PlanError,
    PlanSplits,
    StagePlan,
    beam_hop_inputs,
)
from musique_models.settings import OfficialFacts
from musique_models.systems import system_name

__all__ = [
    "BEAM_QUESTION_TOKENS",
    "BEAM_RETRIEVER",
    "KINDS",
    "PREDICT",
    "READER",
    "SELECTOR",
    "SEQ2SEQ",
    "TRAIN",
    "Component",
    "DatasetFacts",
    "JobPlan",
    "PlanError",
    "PlanSplits",
    "StagePlan",
    "beam_hop_inputs",
    "components",
    "dataset_facts",
    "job_overrides",
    "plan_experiment",
    "plan_job",
]


@dataclass(frozen=True)
class DatasetFacts:
    """A dataset config's `official` counts (`OfficialFacts`), with its display name: questions per split,
    paragraphs per question, mean hops (supporting paragraphs per question) and rows per question id."""

    display_name: str
    official: OfficialFacts

    @property
    def hops_train(self) -> float:
        """A training question's mean supporting paragraphs."""
        return self.official.train_supporting / self.official.train_questions

    @property
    def hops_dev(self) -> float:
        """A dev question's mean supporting paragraphs."""
        return self.official.dev_supporting / self.official.dev_questions


@dataclass(frozen=True)
class JobPlan:
    """One job (a `train.py` run): its experiment, system row, model, dataset and the work of its stages."""

    name: str
    system: str | None
    model: str
    dataset: str
    train_rows: int
    dev_rows: int
    stages: tuple[StagePlan, ...]

    def steps(self, mode: str) -> int:
        """The job's steps of one mode (`train` or `predict`)."""
        return sum(stage.steps for stage in self.stages if stage.component.mode == mode)

    def as_dict(self) -> dict[str, Any]:
        """The job and its stages (JSON)."""
        return {
            "name": self.name,
            "system": self.system,
            "model": self.model,
            "dataset": self.dataset,
            "train_rows": self.train_rows,
            "dev_rows": self.dev_rows,
            "train_steps": self.steps(TRAIN),
            "predict_steps": self.steps(PREDICT),
            "stages": [stage.as_dict() for stage in self.stages],
        }


def components(jobs: Sequence[JobPlan]) -> dict[str, Component]:
    """Every distinct component of the jobs, by key, in order of first use."""
    found: dict[str, Component] = {}
    for job in jobs:
        for stage in job.stages:
            found.setdefault(stage.component.key, stage.component)
    return found


def dataset_facts(dataset: DictConfig) -> DatasetFacts:
    """The official counts of a composed dataset config (`cfg.dataset.official`); `PlanError` when it has none."""
    official = dataset.get("official")
    if official is None:
        raise PlanError(
            f"dataset={dataset.name}: its config has no `official` counts (questions per split, paragraphs, supporting "
            "paragraphs), which the plan needs: add them (conf/dataset/musique_ans.yaml shows how)"
        )
    facts = OmegaConf.to_object(official) if OmegaConf.is_config(official) else official
    if isinstance(facts, dict):
        facts = OfficialFacts(**facts)
    return DatasetFacts(str(dataset.get("display_name") or dataset.name), facts)


def plan_job(cfg: DictConfig) -> JobPlan:
    """The plan of one composed `train.py` config (a job): its recipe's `plan` over the dataset's official splits."""
    if cfg.dataset.get("sample"):
        raise PlanError(
            f"dataset.sample=true ({cfg.dataset.name}'s shipped sample): the plan counts runs on the official files; "
            "pass an experiment (experiment=sa_musique_ans) or dataset.sample=false"
        )
    facts = dataset_facts(cfg.dataset)
    official = facts.official
    train_size = cfg.dataset.get("train_size")
    train_questions = official.train_questions if train_size is None else min(int(train_size), official.train_questions)
    eval_size = cfg.get("eval_size")
    dev_questions = official.dev_questions if eval_size is None else min(int(eval_size), official.dev_questions)
    splits = PlanSplits(
        train=train_questions * official.twins,
        dev=dev_questions * official.twins,
        unit="questions" if official.twins == 1 else "rows",  # MuSiQue-Full: a question and its unanswerable twin
        support=facts.hops_train,
        support_dev=facts.hops_dev,
        paragraphs=official.paragraphs,
        twins=official.twins,
        dev_questions=dev_questions,
        dataset=facts.display_name,
        decompositions=official.decompositions,
    )
    recipe = get_class(str(cfg.model._target_))
    planner = getattr(recipe, "plan", None)
    if planner is None:
        raise PlanError(
            f"model={cfg.model.name} ({recipe.__name__}): its recipe has no `plan` (a class method counting its "
            "stages: musique_models/recipes/planning.py)"
        )
    return JobPlan(
        name=str(OmegaConf.select(cfg, "experiment_name", default=None) or f"{cfg.model.name}_{cfg.dataset.name}"),
        system=_system(cfg),
        model=str(cfg.model.name),
        dataset=str(cfg.dataset.name),
        train_rows=splits.train,
        dev_rows=splits.dev,
        stages=tuple(planner(cfg, splits)),
    )


def _system(cfg: DictConfig) -> str | None:
    model = cfg.model
    return system_name(
        {"model_name": model.name, "executor": cfg.get("executor"), "model": {"executor": model.get("executor")}}
    )


# ---- composing an experiment ----------------------------------------------------------------------------------

_BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def job_overrides(overrides: Sequence[str]) -> list[list[str]]:
    """Each job's overrides of `python train.py OVERRIDES` (a multirun's, as Hydra's basic sweeper makes them,
    e.g. the 34 of `experiment=paper_grid`; one job otherwise)."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
    sweeper = cfg.hydra.sweeper
    params = []
    if sweeper.get("_target_") == _BASIC_SWEEPER:
        params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create().parse_overrides([*params, *overrides])
    return [list(job) for batch in BasicSweeper.split_arguments(parsed, max_batch_size=None) for job in batch]


def plan_experiment(overrides: Sequence[str]) -> list[JobPlan]:
    """The plan of `python train.py OVERRIDES`: every job's (e.g. `["experiment=paper_grid"]`: 34 jobs)."""
    from hydra import compose, initialize_config_dir

    jobs = job_overrides(overrides)
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return [plan_job(compose("train", overrides=job)) for job in jobs]
