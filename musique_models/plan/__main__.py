"""`python -m musique_models.plan [OVERRIDES...] [--throughput FILE]... [--stages] [--json PATH]`: the plan of
`python train.py OVERRIDES` (e.g. `experiment=paper_grid`: its 34 jobs; `experiment=sa_musique_ans`: one job) as a
table of jobs with their training and prediction steps, and, from throughput files measured by
`benchmarks/gpu_check.py`, their GPU-hours and peak memory. Without a file, or when a file lacks a component that
a job needs, the steps are printed and the missing measurements named, with the command that makes them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from musique_models.errors import user_errors_exit
from musique_models.io import write_json
from musique_models.plan.jobs import PREDICT, TRAIN, plan_experiment
from musique_models.plan.projection import (
    JOB_HEADERS,
    STAGE_HEADERS,
    Projection,
    job_rows,
    load_throughput,
    merge_throughputs,
    missing_lines,
    project,
    stage_rows,
    table,
)

NOTE = (
    "Counts: training steps are micro-batches (forward, backward, optimizer step), prediction steps are batches "
    "(validation every epoch, ranking, the final prediction of the dev split); inputs are taken at their token caps "
    "and every epoch is run (early stopping can end a stage sooner): upper bounds."
)


def render(projection: Projection, overrides: Sequence[str], stages: bool = False) -> str:
    """The plan and its projection as text: a header, the jobs' table, the stages' table (`stages`, or a single
    job), what is missing and how to measure it."""
    jobs = [cost.job for cost in projection.jobs]
    train_steps = sum(job.steps(TRAIN) for job in jobs)
    predict_steps = sum(job.steps(PREDICT) for job in jobs)
    title = " ".join(overrides) or "the default config"
    lines = [
        f"plan of {title}: {len(jobs)} job{'s' * (len(jobs) != 1)}, {train_steps:,} training steps, "
        f"{predict_steps:,} prediction steps"
    ]
    throughput = projection.throughput
    if throughput is None:
        lines.append("throughput: none given (steps only)")
    else:
        lines.append(f"throughput: {', '.join(throughput.sources)} ({throughput.device})")
        if throughput.tiny:
            lines.append("WARNING: measured at tiny shapes (gpu_check.py --tiny): the hours below are no projection")
    lines += ["", table(JOB_HEADERS, job_rows(projection))]
    if stages or len(jobs) == 1:
        lines += ["", table(STAGE_HEADERS, stage_rows(projection))]
    missing = missing_lines(projection, overrides)
    if missing:
        lines += ["", *missing]
    lines += ["", NOTE]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Compose the experiment's jobs, count their steps, project their cost from the throughput files, print."""
    parser = argparse.ArgumentParser(
        prog="python -m musique_models.plan", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as train.py takes them (experiment=paper_grid)")
    parser.add_argument(
        "--throughput",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="a benchmarks/gpu_check.py result (JSON); repeat to combine files (a later file's measurement wins)",
    )
    parser.add_argument("--stages", action="store_true", help="also list every stage of every job")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the plan and its projection as JSON")
    args = parser.parse_intermixed_args(argv)
    with user_errors_exit():
        # the files first: a bad one fails in a moment, before the configs compose
        throughputs = [load_throughput(path) for path in args.throughput]
        jobs = plan_experiment(args.overrides)
    projection = project(jobs, merge_throughputs(throughputs) if throughputs else None)
    print(render(projection, args.overrides, args.stages))
    if args.json is not None:
        write_json(args.json, {"overrides": args.overrides, **projection.as_dict()})
        print(f"\nwritten: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
