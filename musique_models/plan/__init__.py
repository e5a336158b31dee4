"""What a run will cost before it starts: `python -m musique_models.plan experiment=paper_grid [--throughput FILE]`.

`jobs`: the plan of an experiment (its jobs; per job its stages, each with its component, examples, batch, epochs
and steps), from the composed configs. `projection`: GPU-hours per stage, job and grid, and peak memory per job,
from a throughput file measured by `benchmarks/gpu_check.py`. The CLI is `musique_models/plan/__main__.py`.
"""

from musique_models.plan.jobs import (
    KINDS,
    PREDICT,
    TRAIN,
    Component,
    DatasetFacts,
    JobPlan,
    PlanError,
    StagePlan,
    components,
    dataset_facts,
    job_overrides,
    plan_experiment,
    plan_job,
)
from musique_models.plan.projection import (
    JobCost,
    Measurement,
    Projection,
    StageCost,
    Throughput,
    load_throughput,
    merge_throughputs,
    parse_throughput,
    project,
)

__all__ = [
    "KINDS",
    "PREDICT",
    "TRAIN",
    "Component",
    "DatasetFacts",
    "JobCost",
    "JobPlan",
    "Measurement",
    "PlanError",
    "Projection",
    "StageCost",
    "StagePlan",
    "Throughput",
    "components",
    "dataset_facts",
    "job_overrides",
    "load_throughput",
    "merge_throughputs",
    "parse_throughput",
    "plan_experiment",
    "plan_job",
    "project",
]
