"""`python -m musique_models.report`: every cell of table.md against the runs' metrics.json and the paper file,
the PNG's size, the offline wandb path giving the same table, the online mapping on a fake run, one-line errors."""

from __future__ import annotations

import json
import statistics
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from hydra import compose, initialize_config_dir

from musique_models import PROJECT_ROOT
from musique_models.cli.train import train
from musique_models.io import write_json
from musique_models.report.__main__ import main
from musique_models.report.runs import record_from_wandb_run
from musique_models.report.tables import PAPER_RESULTS, parse_markdown_table

TINY = [
    "backbone=tiny",
    "dataset.sample=true",
    "dataset.train_size=6",
    "eval_size=4",
    "trainer.fast_dev_run=true",
    "trainer.enable_progress_bar=false",
    "trainer.threads=1",
]
# folder -> (system, dataset, overrides): two seeds of one system, and a multirun of two jobs
RUNS = {
    "runs/sa_seed1": ("SA", "musique_ans", ["model=select_answer", "dataset=musique_ans", "seed=1", "logger=wandb"]),
    "runs/sa_seed2": ("SA", "musique_ans", ["model=select_answer", "dataset=musique_ans", "seed=2", "logger=wandb"]),
    "multi/0": ("SA", "hotpotqa_20k", ["model=select_answer", "dataset=hotpotqa_20k", "logger=none"]),
    "multi/1": ("1-Para", "hotpotqa_20k", ["model=one_para", "dataset=hotpotqa_20k", "logger=none"]),
}
LABELS = {
    "musique_ans": "MuSiQue-Ans",
    "hotpotqa_20k": "HotpotQA",
    "2wiki_20k": "2Wiki",
    "musique_full": "MuSiQue-Full",
}
METRICS = {
    "An": "answer_f1",
    "Sp": "support_f1",
    "Sf": "sufficiency_f1",
    "An+Sf": "group_answer_sufficiency_f1",
    "Sp+Sf": "group_support_sufficiency_f1",
}


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four finished tiny runs (two in a multirun-shaped folder) and one unfinished job folder."""
    root = tmp_path_factory.mktemp("report")
    for folder, (_, _, overrides) in RUNS.items():
        with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
            cfg = compose(
                "train",
                overrides=[*TINY, *overrides, f"paths.cache_dir={root}/cache", f"paths.output_dir={root / folder}"],
            )
        train(cfg)
    (root / "multi" / "multirun.yaml").write_text("hydra: {mode: MULTIRUN}\n")
    unfinished = root / "multi" / "2"
    unfinished.mkdir()
    (unfinished / "config.yaml").write_text((root / "multi" / "0" / "config.yaml").read_text())
    write_json(unfinished / "status.json", {"status": "running"})
    return root


def expected_cell(values: list[float], paper: float | None) -> str:
    scaled = [100 * v for v in values]
    if not scaled:
        ours = "–"
    elif len(scaled) == 1:
        ours = f"{scaled[0]:.1f}"
    else:
        ours = f"{statistics.fmean(scaled):.1f} ± {statistics.stdev(scaled):.1f} (n={len(scaled)})"
    if paper is None:
        return f"{ours} (–)"
    if not scaled:
        return f"{ours} ({paper:.1f})"
    return f"{ours} ({paper:.1f}, {statistics.fmean(scaled) - paper:+.1f})"


def paper_figures() -> dict[tuple[str, str, str], float]:
    figures = yaml.safe_load(PAPER_RESULTS.read_text())["figures"]
    for figure in figures:
        assert figure["where"] and figure["url"].startswith("https://"), figure  # every figure says its source
    return {(f["system"], f["dataset"], f["metric"]): f["value"] for f in figures}


def run_report(tmp_path: Path, *arguments: str) -> Path:
    out = tmp_path / "out"
    assert main([*arguments, "--out", str(out)]) == 0
    return out


def test_table_cells_match_the_runs_and_the_paper(runs_root: Path, tmp_path: Path) -> None:
    out = run_report(tmp_path, str(runs_root / "runs"), str(runs_root / "multi"))
    rows = {row["system"]: row for row in parse_markdown_table((out / "table.md").read_text())}
    paper = paper_figures()

    metrics = {folder: json.loads((runs_root / folder / "metrics.json").read_text()) for folder in RUNS}
    expected_rows = {f"{system} [sample]" for system, _, _ in RUNS.values()}
    expected_rows |= {system for system, _, metric in paper if system and metric in METRICS}
    assert set(rows) == expected_rows
    order = ["EE", "SA", "EX(EE)", "EX(SA)", "Q-only", "C-only", "1-Para"]
    labels = list(rows)
    assert labels == sorted(labels, key=lambda label: (order.index(label.split()[0]), label))
    for label, row in rows.items():
        system, sample = label.split()[0], label.endswith("[sample]")
        columns = [c for c in row if c != "system"]
        assert len(columns) == 11
        for column in columns:
            dataset = next(d for d, name in LABELS.items() if column.startswith(name + " "))
            metric = column[len(LABELS[dataset]) + 1 :]
            values = [
                metrics[folder][METRICS[metric]]
                for folder, (run_system, run_dataset, _) in RUNS.items()
                if sample and run_system == system and run_dataset == dataset and METRICS[metric] in metrics[folder]
            ]
            assert row[column] == expected_cell(values, paper.get((system, dataset, metric))), (label, column)
    assert "± " in rows["SA [sample]"]["MuSiQue-Ans An"] and "(n=2)" in rows["SA [sample]"]["MuSiQue-Ans An"]
    table = (out / "table.md").read_text()
    assert "SAMPLE runs" in table and str(runs_root / "multi" / "0") in table
    assert "\\begin{tabular}" in (out / "table.tex").read_text()
    per_hop = (out / "per_hop.md").read_text()
    assert "| answer_f1 |" in per_hop and "2hop" in per_hop
    assert "DiRe" in (out / "dire.md").read_text()
    png = (out / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    assert struct.unpack(">II", png[16:24]) == (1200, 500)


def test_dire_md_sets_each_dire_score_beside_its_original(runs_root: Path, tmp_path: Path) -> None:
    from musique_models.cli.score_run import score_run

    run = runs_root / "multi" / "0"
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        score_run(compose("evaluate", overrides=[f"run={run}", "mode=dire", "threads=1"]))
    scored = json.loads((run / "evaluations" / "hotpotqa_20k-dev-dire-half" / "metrics.json").read_text())
    out = run_report(tmp_path, str(runs_root / "multi"))
    rows = [
        row
        for row in parse_markdown_table((out / "dire.md").read_text())
        if row["run group"] == "SA [sample], HotpotQA"
    ]
    assert [row["metric"] for row in rows] == [
        "answer_f1",
        "dire_answer_f1",
        "support_f1",
        "dire_support_f1",
        "dire_joint_f1",
    ]
    for row in rows:
        for column, suffix in (("all", ""), ("2hop", "_2hop"), ("3hop", "_3hop"), ("4hop", "_4hop")):
            value = scored.get(row["metric"] + suffix)
            assert row[column] == ("–" if value is None else f"{100 * value:.1f}"), (row["metric"], column)


def test_unfinished_runs_are_skipped_with_a_warning(runs_root: Path, tmp_path: Path, capsys) -> None:
    run_report(tmp_path, str(runs_root / "multi"))
    err = capsys.readouterr().err
    assert f"skipped {runs_root / 'multi' / '2'}: not finished" in err


def test_offline_wandb_folders_give_the_same_table(runs_root: Path, tmp_path: Path) -> None:
    from_folders = run_report(tmp_path / "folders", str(runs_root / "runs"))
    from_wandb = run_report(tmp_path / "wandb", "--wandb-dir", str(runs_root / "runs"))
    assert parse_markdown_table((from_wandb / "table.md").read_text()) == parse_markdown_table(
        (from_folders / "table.md").read_text()
    )


def test_online_wandb_run_mapping() -> None:
    run = SimpleNamespace(
        state="finished",
        path=["me", "musique-models", "abc123"],
        config={
            "_wandb": {"value": {"cli_version": "0.31.0"}},
            "model_name": {"value": "step_execution"},
            "model": {"value": {"name": "step_execution", "executor": "end2end"}},
            "dataset": {"value": {"name": "musique_full", "sample": False}},
            "seed": {"value": 100},
        },
        summary={"test/answer_f1": 0.5, "test/support_f1_2hop": 0.25, "_runtime": 3.0, "answerer/val/answer_f1": 0.9},
    )
    record = record_from_wandb_run(run)
    assert (record.system, record.dataset, record.sample, record.seed) == ("EX(EE)", "musique_full", False, 100)
    assert record.metrics == {"answer_f1": 0.5, "support_f1_2hop": 0.25}
    assert record.source == "wandb:me/musique-models/abc123"
    assert record_from_wandb_run(SimpleNamespace(**{**vars(run), "state": "running"})) is None


@pytest.mark.parametrize("arguments", [["/no/such/folder"], []])
def test_user_errors_are_one_line_and_status_2(tmp_path: Path, capsys, arguments: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*arguments, "--out", str(tmp_path / "out")] if arguments else [str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
