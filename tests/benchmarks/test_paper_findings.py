"""benchmarks/paper_findings.py: the settings compose into runs, the held-out sides share nothing, verdicts follow
the intervals, findings come from the runs' per-question files, and runs start in order and fail loudly."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from musique_models import PROJECT_ROOT
from musique_models.evaluation.intervals import Interval
from musique_models.run_files import PER_QUESTION_FILE, RANKING_FILE, STATUS_FILE

spec = importlib.util.spec_from_file_location("paper_findings", PROJECT_ROOT / "benchmarks" / "paper_findings.py")
findings = importlib.util.module_from_spec(spec)
sys.modules["paper_findings"] = findings  # dataclasses resolve their module
spec.loader.exec_module(findings)


def test_every_system_of_the_settings_composes_into_a_train_config(tmp_path: Path) -> None:
    config = findings.load_config()
    sides = findings.Sides("musique_ans", "musique", tmp_path / "train.jsonl", tmp_path / "eval.jsonl", {"train": 200})
    for system in config["systems"]:
        job = findings.train_job(config, tmp_path, sides, system, seed=42)
        overrides = [item for item in job.command[2:] if not item.startswith(("hydra.", "ckpt_path"))]
        with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
            cfg = compose("train", overrides=overrides)
        assert cfg.dataset.sample_files.dev == str(tmp_path / "eval.jsonl") and cfg.eval_size is None
        assert cfg.model.system.name == {"SmolLM2 (0-shot, SA's top 5)": "LLM (prompt)"}.get(system, system)
    llm = findings.train_job(config, tmp_path, sides, "SmolLM2 (0-shot, SA's top 5)", seed=42)
    sa_run = findings.run_folder(tmp_path, "musique_ans", "SA", 200, 42)
    assert (
        llm.after == [str(sa_run)]
        and f"model.selector_checkpoint={sa_run}/selector/checkpoints/best.ckpt" in llm.command
    )


@pytest.mark.slow
def test_the_sides_share_no_question_and_are_written_the_same_twice(tmp_path: Path) -> None:
    config = findings.load_config()
    first = findings.prepare_data(config, tmp_path / "a")
    again = findings.prepare_data(config, tmp_path / "b")
    counts = {name: (sides.counts["train"], sides.counts["evaluation"]) for name, sides in first.items()}
    # MuSiQue-Ans: 100 training questions + one fold of the 200 held out; HotpotQA: 100 + 126 of 252; 2Wiki: 500
    assert counts == {
        "musique_ans": (200, 100),
        "hotpotqa_20k": (226, 126),
        "2wiki_20k": (500, 164),
        "musique_full": (400, 200),
    }
    for name, sides in first.items():
        assert sides.train.read_bytes() == again[name].train.read_bytes()
        assert sides.evaluation.read_bytes() == again[name].evaluation.read_bytes()
        if "overlap" in sides.counts:
            assert {k: v for k, v in sides.counts["overlap"].items() if k != "supporting_paragraphs"} == {
                "ids": 0,
                "questions": 0,
                "single_hop_ids": 0,
            }
    # the same Wikipedia paragraph may support questions on both sides: reported, not refused
    assert first["2wiki_20k"].counts["overlap"]["supporting_paragraphs"] > 0
    full = first["musique_full"].counts
    assert full["real_unpaired_questions"] + full["real_unpaired_left_out_as_seen_in_training"] == 100
    assert 0 < full["real_unpaired_left_out_as_seen_in_training"] < 50


@pytest.mark.parametrize(
    ("low", "high", "direction", "expected"),
    [
        (0.01, 0.2, 1, "holds"),
        (-0.2, -0.01, 1, "does not hold"),
        (-0.05, 0.2, 1, "inconclusive at this scale"),
        (-0.2, -0.01, -1, "holds"),
        (0.01, 0.2, -1, "does not hold"),
        (float("-inf"), float("inf"), 1, "inconclusive at this scale"),
    ],
)
def test_a_verdict_follows_the_interval_and_the_claimed_direction(
    low: float, high: float, direction: int, expected: str
) -> None:
    assert findings.verdict(Interval(0.0, low, high, 100, 0.95), direction) == expected


def _run(folder: Path, rows: list[dict], rankings: list[dict] | None = None) -> None:
    folder.mkdir(parents=True)
    model = {"q-only": "q_only", "1-para": "one_para"}.get(folder.name.split("-n")[0], "select_answer")
    (folder / "config.yaml").write_text(f"model_name: {model}\n")
    (folder / STATUS_FILE).write_text(json.dumps({"status": "finished"}))
    (folder / PER_QUESTION_FILE).write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "metrics.json").write_text("{}")
    if rankings is not None:
        (folder / RANKING_FILE).write_text(json.dumps({"top_k": 2, "rankings": rankings}))


def _row(index: int, answer_f1: float, hops: int = 2) -> dict:
    return {
        "row": index,
        "id": f"q{index}",
        "num_hops": hops,
        "answerable": True,
        "predicted_answerable": True,
        "answer_f1": answer_f1,
        "answer_em": answer_f1,
        "support_f1": 0.0,
        "support_em": 0.0,
        "predicted_support_idxs": [],
        "gold_support_idxs": [0, 1],
        "counts_toward": ["answer", "support"],
    }


def _full_rows(index: int, answer_f1: float, both_right: bool) -> list[dict]:
    answerable = _row(index, answer_f1) | {"counts_toward": ["answer", "support", "answerability", "pair"]}
    contrast = answerable | {"answerable": False, "predicted_answerable": not both_right}
    contrast["counts_toward"] = ["answerability", "pair"]
    return [answerable, contrast]


def test_findings_are_computed_from_the_runs_per_question_files(tmp_path: Path) -> None:
    config = findings.load_config()
    sides = {
        name: findings.Sides(name, "musique", tmp_path, tmp_path, {"train": train})
        for name, train in (("musique_ans", 200), ("hotpotqa_20k", 226), ("musique_full", 400))
    }
    # SA answers the 2-hop half right and the rest wrong; Q-only answers nothing; the selector ranks the gold first
    sa_rows = [_row(i, 1.0 if i < 20 else 0.0, hops=2 if i < 20 else 3) for i in range(40)]
    rankings = [{"id": f"q{i}", "ranking": [0, 1, *range(2, 20)]} for i in range(40)]
    _run(findings.run_folder(tmp_path, "musique_ans", "SA", 200, 42), sa_rows, rankings)
    _run(findings.run_folder(tmp_path, "musique_ans", "Q-only", 200, 42), [_row(i, 0.0) for i in range(40)])
    # C-only names no paragraph for any question; EE names the gold pair for every one
    _run(findings.run_folder(tmp_path, "musique_ans", "C-only", 200, 42), [_row(i, 0.0) for i in range(40)])
    ee_rows = [_row(i, 0.0) | {"predicted_support_idxs": [0, 1], "support_f1": 1.0} for i in range(40)]
    _run(findings.run_folder(tmp_path, "musique_ans", "EE", 200, 42), ee_rows)
    # on HotpotQA SA answers nothing: Q-only's ratio to it is undefined
    _run(findings.run_folder(tmp_path, "hotpotqa_20k", "SA", 226, 42), [_row(i, 0.0) for i in range(40)], rankings)
    _run(findings.run_folder(tmp_path, "hotpotqa_20k", "Q-only", 226, 42), [_row(i, 0.5) for i in range(40)])
    # on MuSiQue-Full pairs, SA gets both answerabilities right on the first 10 pairs only
    full_rows = [row for i in range(40) for row in _full_rows(i, 1.0 if i < 20 else 0.0, both_right=i < 10)]
    _run(findings.run_folder(tmp_path, "musique_full", "SA", 400, 42), full_rows)
    results = findings.Results(config, tmp_path, sides, [42])

    musique = {finding.claim: finding for finding in results.musique_findings()}
    # Q-only names no support (the registry's predicts_support: false): it gets no Sp cell; SA's 0 is a measurement
    assert not results.runs("musique_ans", "Q-only").predicts_support()
    assert results.runs("musique_ans", "SA").predicts_support()
    sa_vs_q_only = musique["SA's An is above Q-only's on MuSiQue-Ans"]
    assert sa_vs_q_only.difference.mean == pytest.approx(0.5) and sa_vs_q_only.verdict == "holds"
    assert "SA 47.3, Q-only 4.6 (Table 4, dev)" in sa_vs_q_only.paper
    silent = "C-only named no supporting paragraph for any question (its support head stayed silent)"
    assert musique["SA's Sp is above C-only's on MuSiQue-Ans"].measured.endswith(silent)
    ee_sp = musique["SA's Sp is above EE's on MuSiQue-Ans"]
    assert "named no supporting" not in ee_sp.measured and ee_sp.verdict == "does not hold"
    one_para = musique["SA's An is above 1-Para's on MuSiQue-Ans"]
    assert one_para.verdict == "not checked" and "runs/musique_ans/1-para-n200-s42" in one_para.measured
    [hops] = results.hop_findings()
    assert hops.difference.mean == pytest.approx(1.0) and hops.difference.low == pytest.approx(1.0)
    selector = {finding.claim: finding for finding in results.selector_findings()}
    [musique_selector] = [f for claim, f in selector.items() if "MuSiQue-Ans" in claim]
    assert musique_selector.difference.mean == pytest.approx(1 - 2 / 20) and musique_selector.verdict == "holds"
    assert "a random ranking's 10.0" in musique_selector.measured
    an_sf, sp_sf = results.full_findings()
    # An+Sf: 1 on the 10 pairs judged right, 0 elsewhere; An: 1 on the first 20 questions: -10/40 on average
    assert an_sf.difference.mean == pytest.approx(-0.25) and an_sf.verdict == "holds"
    q_only_hotpotqa = next(
        f for f in results.artifact_findings() if f.claim.startswith("Q-only") and "HotpotQA" in f.claim
    )
    assert (
        q_only_hotpotqa.verdict == "inconclusive at this scale"
        and "undefined (SA's mean is 0)" in q_only_hotpotqa.measured
    )
    saved = findings.as_dict(q_only_hotpotqa.difference)
    assert saved["unbounded"] and saved["low"] is None and json.loads(json.dumps(saved, allow_nan=False)) == saved
    assert "unbounded" in findings.cell(saved)


def test_questions_sharing_a_sub_question_are_resampled_together(tmp_path: Path) -> None:
    results = findings.Results(findings.load_config(), tmp_path, {}, [42])
    values = {"2hop__1_2": 1.0, "2hop__2_3": 0.0, "3hop1__4_5_6": 1.0, "2hop__7_8": 0.5}
    units = results.units([values])
    assert sorted(units) == [[0.5, 1.0], [1.0, 1.0], [1.0, 2.0]]  # the first two share sub-question 2
    interval = results.mean(values)
    assert interval.mean == pytest.approx(0.625) and interval.count == 3


def test_runs_start_after_what_they_read_and_a_failure_names_its_log(tmp_path: Path) -> None:
    def job(name: str, after: list[str], fail: bool = False) -> findings.Job:
        """A job whose command writes a finished run folder (or exits 3 having written nothing)."""
        folder = tmp_path / name
        finish = (
            f"import pathlib; p = pathlib.Path({str(folder)!r}); p.mkdir(); "
            "(p / 'status.json').write_text('{\"status\": \"finished\"}'); (p / 'metrics.json').write_text('{}')"
        )
        order = f"open({str(tmp_path / 'order')!r}, 'a').write({name!r})"
        command = [sys.executable, "-c", f"{order}; import sys; sys.exit(3)" if fail else f"{order}; {finish}"]
        return findings.Job(
            str(folder),
            command,
            folder,
            lambda: findings.is_finished(folder),
            [str(tmp_path / a) for a in after],
            f"{name}.train.log",
        )

    findings.run_jobs([job("b", ["a"]), job("a", [])], parallel=2, log_dir=tmp_path / "logs")
    assert (tmp_path / "order").read_text() == "ab"
    with pytest.raises(findings.BenchmarkError, match=r"c failed with exit status 3 \(log: .*logs/c.train.log\)"):
        findings.run_jobs([job("c", [], fail=True), job("d", ["c"])], parallel=2, log_dir=tmp_path / "logs")
    assert not (tmp_path / "d").exists()
    with pytest.raises(findings.BenchmarkError, match="run its part first"):
        findings.run_jobs([job("e", ["never"])], parallel=1, log_dir=tmp_path / "logs")


def test_only_names_known_parts() -> None:
    assert findings.parse_parts("findings,systems") == ["systems", "findings"]
    assert findings.parse_parts(None) == list(findings.PARTS)
    with pytest.raises(findings.BenchmarkError, match="unknown part"):
        findings.parse_parts("system")


def test_run_times_add_up_over_the_calls_that_resumed_the_benchmark() -> None:
    timings: dict = {}
    # a first call runs SA and half of EE (interrupted: not counted), the second finishes EE and a curve point
    findings.add_run_times(timings, {"musique_ans/sa": 100.0}, {"musique_ans/sa": "systems"}, wall=100.0)
    part_of = {"musique_ans/ee": "end2end", "musique_ans/sa-25": "curves"}
    findings.add_run_times(timings, {"musique_ans/ee": 50.0, "musique_ans/sa-25": 30.0}, part_of, wall=55.0)
    findings.add_run_times(timings, {"musique_ans/ee": 20.0}, part_of, wall=20.0)
    assert timings["runs_wall"] == 175.0 and timings["run_walls"]["musique_ans/ee"] == 70.0
    assert (timings["systems_run_time"], timings["end2end_run_time"], timings["curves_run_time"]) == (100.0, 70.0, 30.0)
