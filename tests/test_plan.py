"""The plan of an experiment (`musique_models.plan`): steps from the composed configs, GPU-hours from a throughput file
(checked on known numbers), and its command line: the paper grid's 34 jobs without a file, the measurements a job
lacks, and one line with exit status 2 for a bad throughput file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from musique_models.errors import DataFormatError
from musique_models.plan import (
    PREDICT,
    TRAIN,
    PlanError,
    load_throughput,
    parse_throughput,
    plan_job,
    project,
)
from musique_models.plan.__main__ import main as plan_main
from tests.conftest import run_python

# Q-only at known sizes: N = 1,000 training questions, batch B = 16, E = 3 epochs, 100 dev questions at 32 a batch
N, B, E, DEV, EVAL_BATCH = 1000, 16, 3, 100, 32
KNOWN = [
    f"dataset.train_size={N}",
    f"eval_size={DEV}",
    f"model.answerer.micro_batch_size={B}",
    f"model.answerer.max_epochs={E}",
    f"model.eval_batch_size={EVAL_BATCH}",
]


def _throughput_file(path: Path, step_times: dict[str, float], peaks: dict[str, float] | None = None) -> Path:
    components = {key: {"step_s": step, "peak_memory_gib": (peaks or {}).get(key)} for key, step in step_times.items()}
    path.write_text(json.dumps({"device": "test GPU", "tiny": False, "components": components}))
    return path


def test_steps_and_hours_on_known_numbers(compose_train_cfg, tmp_path: Path) -> None:
    answerable = plan_job(compose_train_cfg(["experiment=q_only_musique_ans", *KNOWN]))
    paired = plan_job(compose_train_cfg(["experiment=q_only_musique_full", *KNOWN]))  # twice the rows: the twins
    assert (answerable.train_rows, answerable.dev_rows, paired.train_rows, paired.dev_rows) == (N, DEV, 2 * N, 2 * DEV)
    work = {(stage.stage, stage.work): stage for stage in answerable.stages}
    assert list(work) == [("answerer", "train"), ("answerer", "validate"), ("answerer", "predict the dev split")]
    train, validate, predict = work.values()
    assert (train.examples, train.batch, train.repeats, train.steps) == (N, B, E, math.ceil(N / B) * E)
    assert (validate.examples, validate.batch, validate.repeats) == (DEV, EVAL_BATCH, E)
    assert validate.steps == math.ceil(DEV / EVAL_BATCH) * E and predict.steps == math.ceil(DEV / EVAL_BATCH)
    assert train.component.mode == TRAIN and predict.component.mode == PREDICT
    assert train.component.key == "bart_large/seq2seq/train/b16x102/t32"  # question <= 100 + 2, answer <= 30 + 2
    assert validate.component == predict.component and predict.component.key.endswith("/b32x102/t31/beam1")

    path = _throughput_file(
        tmp_path / "gpu_check.json", {train.component.key: 0.5, predict.component.key: 0.25}, {train.component.key: 7.5}
    )
    projection = project([answerable, paired], load_throughput(path))
    first, second = projection.jobs
    assert first.stages[0].hours == math.ceil(N / B) * E * 0.5 / 3600  # exactly: steps x step time / 3600
    expected = [
        (math.ceil(rows / B) * E * 0.5 + math.ceil(dev / EVAL_BATCH) * (E + 1) * 0.25) / 3600
        for rows, dev in [(N, DEV), (2 * N, 2 * DEV)]
    ]
    assert [first.hours, second.hours] == pytest.approx(expected, rel=1e-12)
    assert projection.hours == pytest.approx(sum(expected), rel=1e-12)
    assert first.peak_memory_gib == second.peak_memory_gib == 7.5 and projection.missing == {}

    # a measurement the file lacks: no hours for the jobs that need it, named with those jobs
    partial = project([answerable, paired], load_throughput(_throughput_file(tmp_path / "part.json", {"x": 1.0})))
    assert partial.hours is None and partial.jobs[0].hours is None
    assert partial.missing == {
        train.component.key: [answerable.name, paired.name],
        predict.component.key: [answerable.name, paired.name],
    }


@pytest.mark.slow
def test_the_paper_grid_from_the_command_line_without_a_throughput_file(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    result = run_python(["-m", "musique_models.plan", "experiment=paper_grid", "--json", str(out)], timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    plan = json.loads(out.read_text())
    jobs = {job["name"]: job for job in plan["jobs"]}
    assert len(jobs) == 34 and plan["gpu_hours"] is None and plan["throughput"] is None
    lines = result.stdout.splitlines()
    for name in jobs:
        assert sum(line.startswith(f"{name} ") for line in lines) == 1, name
    assert any(line.startswith("total (34 jobs)") for line in lines)
    # every component is missing, named with the command that measures it
    missing = plan["missing"]
    assert f"missing measurements ({len(missing)} components; no throughput file given):" in result.stdout
    assert sorted(missing) == sorted({stage["component"] for job in jobs.values() for stage in job["stages"]})
    for key in missing:
        assert f"  {key}  (needed by " in result.stdout
    assert "python benchmarks/gpu_check.py --device cuda --json gpu_check.json experiment=paper_grid" in result.stdout

    def stage(job: str, name: str, work: str) -> dict:
        (found,) = [s for s in jobs[job]["stages"] if (s["stage"], s["work"]) == (name, work)]
        return found

    # the configs' batches and epochs on the official sizes (MuSiQue-Ans: 19,938 training, 2,417 dev questions)
    assert stage("ee_musique_ans", "end2end", "train")["steps"] == math.ceil(19_938 / 4) * 3
    assert stage("ee_musique_ans", "end2end", "validate")["steps"] == math.ceil(2_417 / 2) * 3
    assert stage("ee_musique_full", "end2end", "train")["examples"] == 2 * 19_938  # each question and its twin
    assert stage("c_only_hotpotqa_20k", "c_only", "train")["steps"] == math.ceil(20_000 / 4) * 10
    assert stage("sa_hotpotqa_20k", "selector", "train")["steps"] == math.ceil(20_000 / 16) * 10
    assert stage("sa_musique_ans", "selector", "rank the training split")["examples"] == 19_938 * 20  # pairs
    # EX(EE) on MuSiQue-Ans: epochs of 2,000 optimizer steps of 3 micro-batches, over the single-hop questions
    reader = stage("ex_ee_musique_ans", "executor_reader", "train")
    assert reader["examples"] == 46_613 and reader["steps_cap"] == 2_000 * 3 and reader["steps"] == 2_000 * 3 * 3
    assert stage("ex_sa_2wiki_20k", "decomposer", "train")["steps"] == math.ceil(20_000 / 16) * 3
    # Beam SA trains its retriever on the answerable rows only: MuSiQue-Full's twins have no chain
    assert stage("beam_sa_musique_full", "selector", "train")["examples"] == 19_938
    assert jobs["q_only_2wiki_20k"]["train_steps"] == math.ceil(20_000 / 16) * 10


def test_a_job_lacking_a_measurement_names_it_and_the_command(tmp_path: Path, capsys) -> None:
    overrides = ["experiment=sa_musique_ans", "dataset.train_size=1000", "eval_size=40"]
    measured = "longformer_large/reader/train/b4x3072p7/ckpt"
    path = _throughput_file(tmp_path / "gpu_check.json", {measured: 1.5}, {measured: 40.0})
    assert plan_main([*overrides, "--throughput", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"throughput: {path} (test GPU)" in out
    assert "missing measurements (3 components; not in the throughput file):" in out
    for key in [
        "roberta_large/selector/train/b57x302",
        "roberta_large/selector/predict/b32x302",
        "longformer_large/reader/predict/b32x3072p7",
    ]:
        assert f"  {key}  (needed by sa_musique_ans)" in out
    assert measured not in out.split("missing measurements")[1]
    assert "--only roberta_large/selector/train/b57x302 " in out
    # one job: its stages are listed, the measured one with its hours (ceil(1,000 / 4) x 3 = 750 steps of 1.5 s),
    # the job with its peak memory and no total
    train = next(line for line in out.splitlines() if line.startswith("sa_musique_ans") and measured in line)
    assert train.split()[-3:] == ["750", "1.5", "0.31"]
    job = next(line for line in out.splitlines() if line.startswith("sa_musique_ans ") and "musique_ans" in line)
    assert job.split()[-2:] == ["-", "40.0"]


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ("{not json", None),
        ('{"device": "x"}', "components"),
        ('{"components": {"k": {"step_s": "fast"}}}', "components.k.step_s"),
        ('{"components": {"k": {"step_s": 0}}}', "components.k.step_s"),
        ('{"components": {"k": {"step_s": 1.0, "peak_memory_gib": -1}}}', "components.k.peak_memory_gib"),
    ],
)
def test_a_bad_throughput_file_is_one_line_naming_the_file_and_field(
    content: str, field, tmp_path: Path, capsys
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(DataFormatError) as raised:
        load_throughput(path)
    assert str(path) in str(raised.value) and (field is None or f"field {field!r}" in str(raised.value))
    with pytest.raises(SystemExit) as exited:
        plan_main(["experiment=sa_musique_ans", "--throughput", str(path)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {path}") and "Traceback" not in err


def test_a_missing_throughput_file_exits_2_with_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "gpu_check.json"
    result = run_python(["-m", "musique_models.plan", "experiment=paper_grid", "--throughput", str(missing)])
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: {missing}: no such throughput file")
    assert "benchmarks/gpu_check.py --device cuda" in result.stderr and result.stdout == ""


def test_what_the_plan_cannot_count_is_one_line(compose_train_cfg, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        plan_main([])  # the default: the shipped sample
    assert exited.value.code == 2 and "dataset.sample=true" in capsys.readouterr().err
    with pytest.raises(PlanError, match="needs decompositions"):
        plan_job(compose_train_cfg(["experiment=ex_sa_musique_ans", "dataset=hotpotqa_20k"]))
    # a dataset config without the official counts; a recipe without a plan (the prompted LLM)
    with pytest.raises(PlanError, match="dataset=musique_ans: its config has no `official` counts"):
        plan_job(compose_train_cfg(["experiment=sa_musique_ans", "dataset.official=null"]))
    with pytest.raises(PlanError, match=r"model=llm_prompt \(PromptedLLM\): its recipe has no `plan`"):
        plan_job(compose_train_cfg(["model=llm_prompt", "dataset.sample=false"]))
    assert parse_throughput({"components": {}}, "x").measurements == {}
