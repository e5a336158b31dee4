"""`python -m musique_models.report`: every cell of table.md against the runs' metrics.json and the paper file,
the PNG's size, the offline wandb path giving the same table, the online mapping on a fake run, one-line errors."""

from __future__ import annotations

import json
import re
import shutil
import statistics
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from hydra import compose, initialize_config_dir

from musique_models import PROJECT_ROOT
from musique_models.io import write_json
from musique_models.report.__main__ import main
from musique_models.report.groups import group_runs
from musique_models.report.paper import PAPER_RESULTS, PaperFigures, load_paper_results
from musique_models.report.plot import TICK_CHARACTERS, ZERO_BAR, draw_report
from musique_models.report.runs import LeaderboardFile, RunRecord, record_from_wandb_run
from musique_models.report.tables import legend, parse_markdown_table, resumed_note, table_rows
from musique_models.runs.train import train

TINY = [
    "backbone=tiny",
    "dataset.sample=true",
    "dataset.train_size=6",
    "eval_size=4",
    "trainer.fast_dev_run=true",
    "trainer.enable_progress_bar=false",
    "trainer.threads=1",
]
# folder -> (system, dataset, overrides): two seeds of one system logged to wandb, a repeat of the first seed (not
# logged: a result-neutral setting), the same system on another backbone, and a multirun of two jobs
RUNS = {
    "logged/sa_seed1": ("SA", "musique_ans", ["model=select_answer", "dataset=musique_ans", "seed=1", "logger=wandb"]),
    "logged/sa_seed2": ("SA", "musique_ans", ["model=select_answer", "dataset=musique_ans", "seed=2", "logger=wandb"]),
    "runs/sa_seed1_again": ("SA", "musique_ans", ["model=select_answer", "dataset=musique_ans", "seed=1"]),
    "runs/sa_longformer": (
        "SA",
        "musique_ans",
        ["model=select_answer", "dataset=musique_ans", "seed=1", "backbone=tiny_longformer", "logger=none"],
    ),
    "multi/0": ("SA", "hotpotqa_20k", ["model=select_answer", "dataset=hotpotqa_20k", "logger=none"]),
    "multi/1": ("1-Para", "hotpotqa_20k", ["model=one_para", "dataset=hotpotqa_20k", "logger=none"]),
}
# the row of each counted run: seed 1 counts once, as its newest run (made after logged/sa_seed1)
ROWS = {
    "runs/sa_seed1_again": "SA [sample] (backbone=tiny)",
    "logged/sa_seed2": "SA [sample] (backbone=tiny)",
    "runs/sa_longformer": "SA [sample] (backbone=tiny_longformer)",
    "multi/0": "SA [sample]",
    "multi/1": "1-Para [sample]",
}
LABELS = {
    "musique_ans": "MuSiQue-Ans",
    "hotpotqa_20k": "HotpotQA",
    "2wiki_20k": "2Wiki",
    "musique_full": "MuSiQue-Full",
}
NO_FIGURES = PaperFigures([], {}, Path("none.yaml"))
METRICS = {
    "An": "answer_f1",
    "Sp": "support_f1",
    "Sf": "sufficiency_f1",
    "An+Sf": "group_answer_sufficiency_f1",
    "Sp+Sf": "group_support_sufficiency_f1",
}


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six finished tiny runs (two in a multirun-shaped folder) and one unfinished job folder."""
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


def without_interval(cell: str) -> str:
    """A cell as a run without per-question scores shows it: its bootstrap interval (`[45.4, 49.2]`) left out."""
    return re.sub(r" \[-?[0-9.]+, -?[0-9.]+\]", "", cell)


def expected_ours(values: list[float]) -> str:
    scaled = [100 * v for v in values]
    if not scaled:
        return "–"
    if len(scaled) == 1:
        return f"{scaled[0]:.1f}"
    return f"{statistics.fmean(scaled):.1f} ± {statistics.stdev(scaled):.1f} (n={len(scaled)})"


def paper_figures(split: str = "dev", path: Path = PAPER_RESULTS) -> dict[tuple[str, str, str], float]:
    """(system, dataset, metric) -> value of the data file's figures of `split` that a run of the paper's setup is
    set beside, read here from the raw file: the paper's Table 4 (dev) or Table 5 (test), and for a dev cell that
    Table 4 lacks, the official repository's."""
    data = yaml.safe_load(path.read_text())
    for figure in data["figures"]:  # every figure says its source, table and split
        assert figure["source"] in data["sources"] and figure["table"] and "split" in figure, figure
        assert data["sources"][figure["source"]]["url"].startswith("https://"), figure
    main = [
        f
        for f in data["figures"]
        if f["split"] == split
        and not {"hops", "setting", "kind"} & set(f)
        and (f["table"] in ("Table 4", "Table 5") or f["source"] == "repository")
    ]
    ranked = sorted(main, key=lambda f: f["table"] not in ("Table 4", "Table 5"), reverse=True)
    return {(f["system"], f["dataset"], f["metric"]): f["value"] for f in ranked}  # the paper's tables win


def run_report(tmp_path: Path, *arguments: str) -> Path:
    out = tmp_path / "out"
    assert main([*arguments, "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_runs_group_only_when_they_differ_in_the_seed_and_each_seed_counts_once(
    runs_root: Path, tmp_path: Path
) -> None:
    out = run_report(tmp_path, *(str(runs_root / folder) for folder in ("logged", "runs", "multi")))
    rows = {row["system"]: row for row in parse_markdown_table((out / "table.md").read_text())}
    paper = paper_figures()

    metrics = {folder: json.loads((runs_root / folder / "metrics.json").read_text()) for folder in RUNS}
    paper_systems = {system for system, _, metric in paper if metric in METRICS}
    # a system without a comparable run gets a row of the paper's figures alone, marked so: never read as ours
    paper_rows = {f"{system} (paper only)" for system in paper_systems}
    assert set(rows) == set(ROWS.values()) | paper_rows
    order = ["EE", "SA", "EX(EE)", "EX(SA)", "Q-only", "C-only", "1-Para", "RNN", "Human score", "Human upper bound"]
    labels = list(rows)
    system_of = {label: label.split(" [")[0].removesuffix(" (paper only)") for label in labels}
    assert labels == sorted(labels, key=lambda label: (order.index(system_of[label]), "[" in label, label))
    for label, row in rows.items():
        system = system_of[label] if label in paper_rows else label.split()[0]
        columns = [c for c in row if c != "system"]
        assert len(columns) == 11
        for column in columns:
            dataset = next(d for d, name in LABELS.items() if column.startswith(name + " "))
            metric = column[len(LABELS[dataset]) + 1 :]
            values = [
                metrics[folder][METRICS[metric]]
                for folder, row_label in ROWS.items()
                if row_label == label and RUNS[folder][1] == dataset and METRICS[metric] in metrics[folder]
            ]
            if label in paper_rows:  # the paper's own row: its figures, no run of ours (every run is a sample)
                figure = paper.get((system, dataset, metric))
                expected = "–" if figure is None else f"paper: {figure:.1f}"
                if dataset == "musique_full" and figure is not None:  # the repository's dev figure
                    expected += "†"
                assert row[column] == expected, (label, column)
            else:  # sample runs are never set beside the paper's figures; the runs kept per-question scores
                assert without_interval(row[column]) == expected_ours(values), (label, column)
                assert (row[column] != expected_ours(values)) == bool(values), (label, column)
    # seeds 1 and 2 of the tiny backbone: n=2, the repeat of seed 1 not counted, the other backbone apart
    assert rows["SA [sample] (backbone=tiny)"]["MuSiQue-Ans An"].endswith("(n=2)")
    table = (out / "table.md").read_text()
    assert f"seed 1: {runs_root / 'runs/sa_seed1_again'}, seed 2: {runs_root / 'logged/sa_seed2'}" in table
    assert f"  - repeat of seed 1, not counted: {runs_root / 'logged/sa_seed1'}" in table
    assert "\\begin{tabular}" in (out / "table.tex").read_text()
    per_hop = (out / "per_hop.md").read_text()
    assert "## SA [sample] (backbone=tiny_longformer) on MuSiQue-Ans" in per_hop and "| answer_f1 |" in per_hop
    assert "DiRe" in (out / "dire.md").read_text()
    png = (out / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    assert struct.unpack(">II", png[16:24]) == (1200, 500)


def _copy_run(source: Path, target: Path, origin: str, **config: object) -> None:
    """A copy of a finished run whose provenance says it read `origin` files, with `config` values changed."""
    shutil.copytree(source, target)
    provenance = json.loads((target / "provenance.json").read_text())
    provenance["data"]["origin"] = origin
    write_json(target / "provenance.json", provenance)
    saved = yaml.safe_load((target / "config.yaml").read_text())
    for key, value in config.items():
        section, _, name = key.rpartition(".")
        (saved[section] if section else saved)[name] = value
    (target / "config.yaml").write_text(yaml.safe_dump(saved))


def test_only_runs_on_the_official_files_and_the_papers_setup_are_set_beside_the_paper(
    runs_root: Path, tmp_path: Path
) -> None:
    one_para = runs_root / "multi" / "1"
    copies = tmp_path / "copies"
    paper_setup = {"dataset.sample": False, "dataset.train_size": 20000, "eval_size": None}
    _copy_run(one_para, copies / "official", "official", **paper_setup)
    _copy_run(one_para, copies / "subset", "official", **{**paper_setup, "eval_size": 100})
    _copy_run(one_para, copies / "own_files", "other files", **paper_setup)
    out = run_report(tmp_path, str(copies))
    rows = {row["system"]: row for row in parse_markdown_table((out / "table.md").read_text())}
    an = 100 * json.loads((one_para / "metrics.json").read_text())["answer_f1"]
    assert without_interval(rows["1-Para"]["HotpotQA An"]) == f"{an:.1f} (64.8, {an - 64.8:+.1f})"
    assert without_interval(rows["1-Para [100 questions]"]["HotpotQA An"]) == f"{an:.1f}"
    assert without_interval(rows["1-Para [other files]"]["HotpotQA An"]) == f"{an:.1f}"
    # the three differ in their setup, never only in the seed: none is averaged with another
    assert all("(n=" not in row["HotpotQA An"] for row in rows.values())


def test_provenance_differences_within_a_group_are_shown(runs_root: Path, tmp_path: Path) -> None:
    copies = tmp_path / "copies"
    _copy_run(runs_root / "logged/sa_seed1", copies / "a", "sample")
    _copy_run(runs_root / "logged/sa_seed2", copies / "b", "sample")
    provenance = json.loads((copies / "b/provenance.json").read_text())
    torch_version = provenance["versions"]["torch"]
    provenance["code"]["commit"] = "0" * 40
    provenance["versions"]["torch"] = "9.9.9"
    write_json(copies / "b/provenance.json", provenance)
    table = (run_report(tmp_path, str(copies)) / "table.md").read_text()
    commit = json.loads((copies / "a/provenance.json").read_text())["code"]["commit"]
    assert f"  - the runs differ in code.commit: {commit}, {'0' * 40}" in table
    assert f"  - the runs differ in versions.torch: {torch_version}, 9.9.9" in table
    rows = parse_markdown_table(table)
    assert [row["system"] for row in rows if "(n=2)" in row["MuSiQue-Ans An"]] == ["SA [sample]"]


def test_every_group_gets_its_own_label_and_row_however_few_settings_set_it_apart() -> None:
    def record(seed: int, answer_f1: float, **settings: object) -> RunRecord:
        model = {"name": "select_answer", "selector": {"backbone": {"name": "tiny", "learning_rate": 1e-4}}}
        model.update(settings)
        config = {"dataset": {"name": "musique_ans", "train_size": 20000}, "model": model, "seed": seed}
        provenance = {"data": {"origin": "sample", "files": {"dev": {"sha256": "f"}}}}
        return RunRecord(
            "SA", "SA", "musique_ans", True, seed, {"answer_f1": answer_f1}, config=config, provenance=provenance
        )

    groups = group_runs(
        [
            record(1, 0.1),
            record(1, 0.5, a=1, b=1, c=1, d=1),
            record(1, 0.3, a=1, b=1, c=1, d=2),  # apart from the one above only in a fourth setting
            record(1, 0.7, selector_checkpoint="/runs/one/selector/checkpoints/best.ckpt"),
            record(1, 0.9, selector_checkpoint="/runs/two/selector/checkpoints/best.ckpt"),  # another reused selector
        ]
    )
    labels = [group.row_label for group in groups]
    assert len(groups) == 5 and len(set(labels)) == 5, labels
    # b and c vary as a does: counted, not shown; the fewest settings that tell every group apart (a is not one)
    assert "SA [sample] (model.d=2, model.selector_checkpoint=null, +3 more)" in labels
    rows = [row for row in table_rows(groups, NO_FIGURES) if row.label in labels]
    assert sorted(len(row.cells[0][0]) for row in rows) == [1, 1, 1, 1, 1]  # never two groups in one cell
    assert [row.label for row in rows] == labels  # the groups come in the order of the table's rows

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots()
    draw_report(axes, groups, NO_FIGURES)
    ticks = [tick.get_text() for tick in axes.get_xticklabels()]
    assert max(len(line) for tick in ticks for line in tick.splitlines()) <= TICK_CHARACTERS // len(groups)
    assert ["".join(tick.split()) for tick in ticks] == ["".join(f"{label}, MuSiQue-Ans".split()) for label in labels]
    plt.close(figure)


def test_report_png_draws_zeros_missing_scores_values_and_the_papers_diamonds() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def record(system: str, metrics: dict[str, float], origin: str, dataset: str = "hotpotqa_20k") -> RunRecord:
        config = {"dataset": {"name": dataset, "sample": origin == "sample", "train_size": 20000}}
        provenance = {"data": {"origin": origin, "files": {"dev": {"sha256": "f"}}}}
        return RunRecord(system, system, dataset, origin == "sample", 1, metrics, config=config, provenance=provenance)

    groups = group_runs(
        [
            record("1-Para", {"answer_f1": 0.0}, "official"),  # An zero, Sp missing; the paper's An is 64.8
            record("C-only", {"answer_f1": 0.25, "support_f1": 0.5}, "sample"),  # no diamond beside a sample
            record("EE", {"answer_f1": 0.3}, "official", "musique_full"),  # the repository's dev An: 40.6
        ]
    )
    figure, axes = plt.subplots()
    draw_report(axes, groups, load_paper_results())  # the paper: 1-Para An 64.8, C-only An 18.4 and Sp 67.6
    heights = sorted(round(patch.get_height(), 3) for patch in axes.patches)
    assert heights == [ZERO_BAR, 25.0, 30.0, 50.0]  # the zero is a visible sliver; a missing Sp has no bar
    assert sorted(text.get_text() for text in axes.texts) == ["0.0", "25.0", "30.0", "50.0", "n/a", "n/a"]
    diamonds = [line for line in axes.lines if line.get_marker() == "D" and len(line.get_xdata())]
    systems = [group.system for group in groups]  # An's bar is the left one of its group
    drawn = [(float(line.get_xdata()[0]), float(line.get_ydata()[0]), line.get_fillstyle()) for line in diamonds]
    assert sorted(drawn) == sorted(
        [
            (systems.index("1-Para") - 0.19, 64.8, "full"),
            (systems.index("EE") - 0.19, 40.6, "none"),  # hollow: the repository's
            (systems.index("EE") + 0.19, 32.5, "none"),
        ]
    )
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert "the paper" in legend and "official repo (dev)" in legend
    # the human score of HotpotQA (Table 4: An 84.5, Sp 92.5) across each bar of the comparable group only; none for
    # MuSiQue-Full (no human figure)
    human = sorted((round(float(y), 1), round(float(x1 - x0), 2)) for x0, x1, y in _dashed_segments(axes))
    assert human == [(84.5, 0.38), (92.5, 0.38)]
    assert "human score (paper, dev)" in legend
    plt.close(figure)


def _dashed_segments(axes: object) -> list[tuple[float, float, float]]:
    """(x start, x end, y) of every horizontal segment that `axes.hlines` drew (error bars are vertical)."""
    segments = []
    for collection in axes.collections:  # type: ignore[attr-defined]
        for (x0, y0), (x1, y1) in collection.get_segments():
            if y0 == y1 and x1 > x0:
                segments.append((x0, x1, y0))
    return segments


def test_dire_md_sets_each_dire_score_beside_its_original(runs_root: Path, tmp_path: Path) -> None:
    from musique_models.runs.score import score_run

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
        "dire_count",
    ]
    for row in rows:  # every row from the DiRe scoring's own metrics, the original scores included
        for column, suffix in (("all", ""), ("2hop", "_2hop"), ("3hop", "_3hop"), ("4hop", "_4hop")):
            value = scored.get(row["metric"] + suffix)
            if value is None:
                assert row[column] == "–", (row["metric"], column)
            else:
                expected = f"{value:.0f}" if row["metric"] == "dire_count" else f"{100 * value:.1f}"
                assert without_interval(row[column]) == expected, (row["metric"], column)


def test_unfinished_runs_are_skipped_with_a_warning(runs_root: Path, tmp_path: Path, capsys) -> None:
    run_report(tmp_path, str(runs_root / "multi"))
    err = capsys.readouterr().err
    assert f"skipped {runs_root / 'multi' / '2'}: not finished" in err


def test_offline_wandb_folders_give_the_same_table(runs_root: Path, tmp_path: Path) -> None:
    from_folders = run_report(tmp_path / "folders", str(runs_root / "logged"))
    from_wandb = run_report(tmp_path / "wandb", "--wandb-dir", str(runs_root / "logged"))
    folder_rows = parse_markdown_table((from_folders / "table.md").read_text())
    wandb_rows = parse_markdown_table((from_wandb / "table.md").read_text())
    # wandb runs have no per-question scores: the same cells without their intervals
    assert wandb_rows == [{key: without_interval(cell) for key, cell in row.items()} for row in folder_rows]
    assert wandb_rows != folder_rows


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


def test_every_model_config_is_in_the_registry_and_the_rows_keep_the_papers_order() -> None:
    from musique_models.systems import display_names, system_name, unregistered_models

    assert unregistered_models() == []
    paper_rows = ["EE", "SA", "EX(EE)", "EX(SA)", "Q-only", "C-only", "1-Para"]
    # the paper's rows in the paper's order (a model added later takes the place its `order` gives it)
    assert [name for name in display_names() if name in paper_rows] == paper_rows
    assert system_name({"model": {"name": "step_execution", "executor": "end2end"}}) == "EX(EE)"
    assert system_name({"model": {"name": "decomposer"}}) is None  # predicts no answers: no row
    # a run of a model whose config is not here keeps the name its own config gave it
    saved = {"model": {"name": "sa_t5", "system": {"name": "SA (T5)", "order": 2}}}
    assert system_name(saved) == "SA (T5)"


def test_a_model_joins_the_paper_grid_by_its_own_config(tmp_path: Path) -> None:
    from musique_models import PROJECT_ROOT
    from musique_models.systems import RegistryError, paper_grid, registry

    paper_models = ["end2end", "select_answer", "step_execution", "q_only", "c_only", "one_para", "decomposer"]
    families = {model: registry()[model].family for model in paper_models}
    assert families == {
        **dict.fromkeys(["end2end", "select_answer", "step_execution"], "multihop"),
        **dict.fromkeys(["q_only", "c_only", "one_para"], "artifact"),
        "decomposer": "stage",
    }
    folder = tmp_path / "model"
    shutil.copytree(PROJECT_ROOT / "conf" / "model", folder)
    before = paper_grid(folder)
    assert before[:2] == ["ee_musique_ans", "ee_musique_full"] and before[-1] == "one_para_2wiki_20k"
    (folder / "gen_reader.yaml").write_text(
        "system: {name: GR, order: 4, family: multihop, paper_experiments: [gr_musique_ans, gr_2wiki_20k]}\n"
    )
    registry.cache_clear()  # the registry is read once a process
    after = paper_grid(folder)
    place = after.index("gr_musique_ans")  # after Step Execution's jobs (order 3), before Q-only's (order 5)
    assert after[place - 1] == "ex_sa_2wiki_20k" and after[place + 2] == "q_only_musique_ans"
    assert [job for job in after if job not in before] == ["gr_musique_ans", "gr_2wiki_20k"]
    (folder / "gen_reader.yaml").write_text("system: {name: GR, order: 4, family: reader}\n")
    registry.cache_clear()
    with pytest.raises(RegistryError, match="gen_reader.yaml: system.family='reader'; expected one of: multihop"):
        registry(folder)


def _official_record(system: str, dataset: str, metrics: dict[str, float], **fields: object) -> RunRecord:
    """A run of the paper's setup: official files, the whole dev split, the 20K training subsample."""
    config = {"dataset": {"name": dataset, "train_size": 20000}, "seed": 1, "system": system}
    provenance = {"data": {"origin": "official", "files": {"dev": {"sha256": dataset}}}}
    return RunRecord(f"/runs/{system}-{dataset}", system, dataset, False, 1, metrics, config=config,
                     provenance=provenance, **fields)  # fmt: skip


SPLIT_RUNS = [
    _official_record(
        "EE",
        "musique_full",
        {"answer_f1": 0.4, "support_f1": 0.3, "group_answer_sufficiency_f1": 0.2, "group_support_sufficiency_f1": 0.25},
        leaderboard_files={
            "musique_full": LeaderboardFile("/runs/EE/evaluations/musique_full-test/predictions.jsonl"),
            "musique_ans": LeaderboardFile("/runs/EE/evaluations/musique_ans-test/predictions.jsonl", "[sample]"),
        },
    ),
    _official_record(
        "EX(SA)",
        "musique_ans",
        {"answer_f1": 0.45, "support_f1": 0.7, **{f"answer_f1_{n}hop": n / 10 for n in (2, 3, 4)}},
        dire_metrics={"dire_answer_f1": 0.3},
    ),
    _official_record("SA", "hotpotqa_20k", {"answer_f1": 0.7, "support_f1": 0.9}, dire_metrics={"dire_answer_f1": 0.6}),
]


def _paper_cells(table_md: str) -> list[tuple[str, str, float, str]]:
    """(system, column, figure, mark) of every paper figure printed in table.md's first table: `ours (figure[†], d)`
    in a row of ours, `paper: figure[†]` in a row of the paper's figures alone."""
    cells = []
    for row in parse_markdown_table(table_md):
        system = row["system"].removesuffix(" (paper only)")
        for column, cell in row.items():
            if cell.startswith("paper: "):
                figure = cell.removeprefix("paper: ")
                cells.append((system, column, float(figure.rstrip("†")), "†" * figure.endswith("†")))
            elif "(" in cell and not cell.endswith("(–)") and column != "system":
                figure = cell.rsplit("(", 1)[1].split(",")[0].rstrip(")")
                cells.append((system, column, float(figure.rstrip("†")), "†" * figure.endswith("†")))
    return cells


@pytest.mark.parametrize("shift", [0.0, 1.0])
def test_every_paper_cell_comes_from_the_data_file_with_the_runs_split(tmp_path: Path, shift: float) -> None:
    """Every figure the report prints is the data file's, with the split it is set beside: a dev run beside dev
    figures (MuSiQue-Full dev: the repository's, marked †), Table 5's test figures only in their own table. With
    every value of the file shifted, every printed figure shifts: none is written into the code."""
    from musique_models.report.build import write_report
    from musique_models.report.tables import parse_markdown_tables

    data = yaml.safe_load(PAPER_RESULTS.read_text())
    for figure in data["figures"]:
        figure["value"] += shift
    paper_file = tmp_path / "paper_results.yaml"
    paper_file.write_text(yaml.safe_dump(data))
    dev, test = paper_figures("dev", paper_file), paper_figures("test", paper_file)
    out = write_report(SPLIT_RUNS, tmp_path / "report", paper_file)
    table_md = (out / "table.md").read_text()

    printed = _paper_cells(table_md)
    assert len(printed) == len([key for key in dev if key[2] in METRICS])  # every dev figure, each once
    for row, column, value, mark in printed:
        dataset = next(d for d, name in LABELS.items() if column.startswith(name + " "))
        metric = column[len(LABELS[dataset]) + 1 :]
        assert value == pytest.approx(dev[(row, dataset, metric)]), (row, column)
        assert mark == ("†" if dataset == "musique_full" else ""), (row, column)
    main = {row["system"]: row for row in parse_markdown_table(table_md)}
    # EE on MuSiQue-Full dev: the repository's dev figure (22.0), never Table 5's test figure (24.0)
    assert main["EE"]["MuSiQue-Full An+Sf"] == f"20.0 ({22.0 + shift:.1f}†, {20.0 - 22.0 - shift:+.1f})"

    tables = parse_markdown_tables(table_md)
    gap, hidden = tables[1], tables[2]
    for row in gap:
        dataset = next(d for d, name in LABELS.items() if row["dataset"] == name)
        human = dev[("Human score", dataset, row["metric"])]
        assert float(row["human score"]) == pytest.approx(human)
        assert float(row["human upper bound"]) == pytest.approx(dev[("Human upper bound", dataset, row["metric"])])
        best_value, best_system = row["the paper's best model"].split(" (", 1)
        assert float(best_value) == pytest.approx(dev[(best_system.removesuffix(")"), dataset, row["metric"])])
        assert float(best_value) == pytest.approx(
            max(v for (s, d, m), v in dev.items() if (d, m) == (dataset, row["metric"]) and not s.startswith("Human"))
        )
    assert [(row["dataset"], row["our best run"]) for row in gap if row["our best run"] != "–"] == [
        ("MuSiQue-Ans", "45.0 (EX(SA))"),
        ("MuSiQue-Ans", "70.0 (EX(SA))"),
        ("HotpotQA", "70.0 (SA)"),
        ("HotpotQA", "90.0 (SA)"),
    ]
    assert {row["system"] for row in hidden} == {s for s, _, _ in test}
    for row in hidden:
        for column, cell in row.items():
            if column in ("system", "our leaderboard files") or cell == "–":
                continue
            dataset = next(d for d, name in LABELS.items() if column.startswith(name + " "))
            assert float(cell) == pytest.approx(test[(row["system"], dataset, column[len(LABELS[dataset]) + 1 :])])
    assert next(row for row in hidden if row["system"] == "EE")["our leaderboard files"] == (
        "EE, MuSiQue-Ans [sample]: /runs/EE/evaluations/musique_ans-test/predictions.jsonl<br>"
        "EE, MuSiQue-Full: /runs/EE/evaluations/musique_full-test/predictions.jsonl"
    )

    per_hop = parse_markdown_tables((out / "per_hop.md").read_text())
    raw = yaml.safe_load(paper_file.read_text())["figures"]
    hops = {f["hops"]: f["value"] for f in raw if f.get("hops") and f["split"] == "dev" and f["system"] == "EX(SA)"}
    expected = [f"{v:.1f}" for v in (dev[("EX(SA)", "musique_ans", "An")], hops[2], hops[3], hops[4])]
    assert [per_hop[0][0][c] for c in ("all", "2hop", "3hop", "4hop")] == expected
    ex_sa = next(t for t in per_hop[1:] if any(r["metric"] == "answer_f1: the paper (dev)" for r in t))
    assert [r for r in ex_sa if r["metric"] == "answer_f1"][0]["2hop"] == "20.0"
    assert [[r[c] for c in ("all", "2hop", "3hop", "4hop")] for r in ex_sa if "the paper" in r["metric"]] == [expected]

    dire = parse_markdown_tables((out / "dire.md").read_text())
    assert {(r["dataset"], r["metric"]): float(r["value"]) for r in dire[1]} == {
        (LABELS[d], m): v for (s, d, m), v in dev.items() if m.startswith("DiRe")
    }
    beside = [r for r in dire[0] if r["metric"] == "dire_answer_f1: the paper (dev)"]
    # the paper gives DiRe of SA only: the EX(SA) run has no figure beside it
    assert [(r["run group"], float(r["all"])) for r in beside] == [
        ("SA, HotpotQA", pytest.approx(dev[("SA", "hotpotqa_20k", "DiRe An")]))
    ]

    reference = (out / "paper.md").read_text()
    for table in ("Table 3", "Table 6", "Table 7"):
        section = reference.split(f"## {table}:")[1].split("\n## ")[0]
        rows = parse_markdown_table(section)
        printed_values = sorted(float(c) for r in rows for k, c in r.items() if k not in ("setting", "split"))
        assert {r["split"] for r in rows} == {"dev"}, table
        assert printed_values == sorted(f["value"] for f in raw if f["table"] == table), table


def test_a_malformed_paper_file_is_refused_naming_the_file_entry_and_field(tmp_path: Path) -> None:
    from musique_models.report.runs import ReportError

    data = yaml.safe_load(PAPER_RESULTS.read_text())
    data["figures"][3]["split"] = "validation"
    bad = tmp_path / "paper_results.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ReportError, match=r"paper_results.yaml: figures\[3\]: field split: 'validation'"):
        load_paper_results(bad)


def test_a_run_shows_the_dire_scoring_of_its_own_evaluation_set_and_musiques_leaderboard_files(tmp_path: Path) -> None:
    """Of a run's `evaluations/` folders, DiRe comes from the one scoring of its own dataset, split, sample and size
    (partition half; on HotpotQA the official conversion's `dire_min_paragraphs=5` first), never merged with
    another; only MuSiQue's test predictions are leaderboard files, each saying what it covers."""
    from musique_models.report.runs import find_run_folders

    run = tmp_path / "run"
    run.mkdir()
    config = {"model_name": "select_answer", "dataset": {"name": "hotpotqa_20k", "sample": False, "train_size": 20000}}
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "seed": 1, "eval_size": None, "eval_split": "dev"}))
    write_json(run / "status.json", {"status": "finished"})
    write_json(run / "metrics.json", {"answer_f1": 0.5})

    def scoring(folder: str, metrics: dict[str, float] | None, **fields: object) -> None:
        path = run / "evaluations" / folder
        path.mkdir(parents=True)
        (path / "predictions.jsonl").write_text("")
        if metrics is not None:
            write_json(path / "metrics.json", metrics)
        dataset, _, rest = folder.partition("-")
        recorded = {"dataset": dataset, "split": rest.split("-")[0], "sample": False, "eval_size": None}
        write_json(path / "scoring.json", {**recorded, "mode": "dire", "partition": "half", **fields})

    scoring("hotpotqa_20k-train-dire-half", {"dire_answer_f1": 0.9})  # another split
    scoring("musique_ans-dev-dire-half", {"dire_answer_f1": 0.8}, dataset="musique_ans")  # another dataset
    scoring("hotpotqa_20k-dev-dire-rest_vs_last", {"dire_answer_f1": 0.7}, partition="rest_vs_last")
    scoring("hotpotqa_20k-dev-dire-half", {"dire_answer_f1": 0.4})
    scoring("hotpotqa_20k-dev-dire-half-min5paragraphs", {"dire_answer_f1": 0.3, "dire_skipped_count": 1.0},
            dire_min_paragraphs=5)  # fmt: skip
    scoring("musique_ans-test", None, dataset="musique_ans", split="test", mode="standard", sample=True)
    scoring("musique_full-test", None, dataset="musique_full", split="test", mode="standard")
    scoring("2wiki_20k-test", None, dataset="2wiki_20k", split="test", mode="standard")  # not in Table 5

    [record], _ = find_run_folders([run])
    assert record.dire_metrics == {"dire_answer_f1": 0.3, "dire_skipped_count": 1.0}
    assert record.dire_source == str(run / "evaluations/hotpotqa_20k-dev-dire-half-min5paragraphs")
    assert record.leaderboard_files == {
        "musique_ans": LeaderboardFile(str(run / "evaluations/musique_ans-test/predictions.jsonl"), "[sample]"),
        "musique_full": LeaderboardFile(str(run / "evaluations/musique_full-test/predictions.jsonl"), ""),
    }
    # without the official conversion's scoring, the one of every question; a scoring of 100 questions is not the
    # run's own (the run scored the whole split)
    shutil.rmtree(run / "evaluations/hotpotqa_20k-dev-dire-half-min5paragraphs")
    [record], _ = find_run_folders([run])
    assert record.dire_metrics == {"dire_answer_f1": 0.4}
    write_json(run / "evaluations/hotpotqa_20k-dev-dire-half/scoring.json",
               {"dataset": "hotpotqa_20k", "split": "dev", "sample": False, "eval_size": 100, "partition": "half"})  # fmt: skip
    [record], _ = find_run_folders([run])
    assert record.dire_metrics == {} and record.dire_source is None


def test_what_a_repeat_of_a_seed_was_scored_with_counts_for_the_kept_run() -> None:
    """The newest run of a seed counts; the DiRe scoring and leaderboard files of an older repeat (same settings,
    same data) stay with it, so the order in which identical runs were made does not lose them."""
    older = _official_record(
        "SA",
        "musique_ans",
        {"answer_f1": 0.5},
        dire_metrics={"dire_answer_f1": 0.3},
        dire_source="/runs/older/evaluations/musique_ans-dev-dire-half",
        leaderboard_files={
            "musique_ans": LeaderboardFile("/runs/older/evaluations/musique_ans-test/predictions.jsonl")
        },
        made_at=1.0,
    )
    newer = _official_record("SA", "musique_ans", {"answer_f1": 0.5}, made_at=2.0)
    newer.source = "/runs/newer"
    [group] = group_runs([older, newer])
    [kept] = group.runs
    assert kept.source == "/runs/newer" and [repeat.source for repeat in group.repeats] == [older.source]
    assert kept.dire_metrics == {"dire_answer_f1": 0.3} and kept.dire_source == older.dire_source
    assert kept.leaderboard_files == older.leaderboard_files
    assert newer.dire_metrics == {}  # the records read are left as they were


def test_a_resumed_run_says_so_in_the_legend() -> None:
    def run(source: str, resumptions: int) -> RunRecord:
        provenance = {"resumptions": [{"code": {}} for _ in range(resumptions)]} if resumptions else {}
        return RunRecord(source, "SA", "musique_ans", True, 42, {"answer_f1": 0.5}, provenance=provenance)

    assert resumed_note(run("a", 0)) == ""
    assert resumed_note(run("a", 1)) == " (resumed once)"
    assert resumed_note(run("a", 3)) == " (resumed 3 times)"
    kept, repeat = run("logs/kept", 0), run("logs/killed-and-resumed", 1)
    repeat.made_at, kept.made_at = 1.0, 2.0
    (group,) = group_runs([kept, repeat])
    assert "  - repeat of seed 42, not counted: logs/killed-and-resumed (resumed once)" in legend([group])
