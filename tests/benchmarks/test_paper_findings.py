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
            assert sides.counts["overlap"] == {"ids": 0, "questions": 0, "single_hop_ids": 0}
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


def test_findings_are_computed_from_the_runs_per_question_files(tmp_path: Path) -> None:
    config = findings.load_config()
    sides = {"musique_ans": findings.Sides("musique_ans", "musique", tmp_path, tmp_path, {"train": 200})}
    # SA answers the 2-hop half right and the rest wrong; Q-only answers nothing; the selector ranks the gold first
    sa_rows = [_row(i, 1.0 if i < 20 else 0.0, hops=2 if i < 20 else 3) for i in range(40)]
    rankings = [{"id": f"q{i}", "ranking": [0, 1, *range(2, 20)]} for i in range(40)]
    _run(findings.run_folder(tmp_path, "musique_ans", "SA", 200, 42), sa_rows, rankings)
    _run(findings.run_folder(tmp_path, "musique_ans", "Q-only", 200, 42), [_row(i, 0.0) for i in range(40)])
    results = findings.Results(config, tmp_path, sides, [42])
    [sa_vs_q_only] = results.musique_findings()
    assert sa_vs_q_only.claim == "SA's An is above Q-only's on MuSiQue-Ans"
    assert sa_vs_q_only.difference.mean == pytest.approx(0.5) and sa_vs_q_only.verdict == "holds"
    assert "SA 47.3, Q-only 4.6 (Table 4, dev)" in sa_vs_q_only.paper
    [hops, *_] = results.hop_findings()
    assert hops.difference.mean == pytest.approx(1.0) and hops.difference.low == pytest.approx(1.0)
    [selector] = results.selector_findings()
    assert selector.difference.mean == pytest.approx(1 - 2 / 20) and selector.verdict == "holds"
    assert "a random ranking's 10.0" in selector.measured


def test_runs_start_after_what_they_read_and_a_failure_names_its_log(tmp_path: Path) -> None:
    def job(name: str, after: list[str], fail: bool = False) -> findings.Job:
        folder = tmp_path / name
        write = (
            ""
            if fail
            else f"import pathlib; p = pathlib.Path({str(folder)!r}); p.mkdir(); (p / 'status.json').write_text('{{\"status\": \"finished\"}}'); "
        )
        order = f"open({str(tmp_path / 'order')!r}, 'a').write({name!r})"
        command = [sys.executable, "-c", write + order]
        return findings.Job(
            str(folder), command, folder, lambda: findings.finished(folder), [str(tmp_path / a) for a in after]
        )

    findings.run_jobs([job("b", ["a"]), job("a", [])], parallel=2, log_dir=tmp_path / "logs")
    assert (tmp_path / "order").read_text() == "ab"
    with pytest.raises(findings.BenchmarkError, match=r"c failed \(log: .*logs/"):
        findings.run_jobs([job("c", [], fail=True), job("d", ["c"])], parallel=2, log_dir=tmp_path / "logs")
    assert not (tmp_path / "d").exists()
    with pytest.raises(findings.BenchmarkError, match="run its part first"):
        findings.run_jobs([job("e", ["never"])], parallel=1, log_dir=tmp_path / "logs")


def test_only_names_known_parts() -> None:
    assert findings.parse_parts("findings,systems") == ["systems", "findings"]
    assert findings.parse_parts(None) == list(findings.PARTS)
    with pytest.raises(findings.BenchmarkError, match="unknown part"):
        findings.parse_parts("system")
