"""The report's intervals and paired tests, on run folders made by hand (config.yaml, status.json, metrics.json,
metrics.per_question.jsonl as train.py writes them; a DiRe scoring under evaluations/): every interval in table.md,
per_hop.md, dire.md, table.tex and report.png, and every row of significance.md, against the evaluation package's
own computation on the same per-question rows."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import yaml

from musique_models.evaluation.evaluator import dire_report, evaluate_predictions, write_report
from musique_models.evaluation.gold import GoldInstance
from musique_models.evaluation.intervals import (
    metric_intervals,
    metric_intervals_over_seeds,
    paired_metric_tests_over_seeds,
)
from musique_models.evaluation.predictions import Prediction, ProbePrediction
from musique_models.io import write_json
from musique_models.report.build import write_report as write_the_report
from musique_models.report.groups import group_runs
from musique_models.report.paper import PaperFigures
from musique_models.report.plot import draw_report
from musique_models.report.runs import find_run_folders
from musique_models.report.tables import parse_markdown_table
from musique_models.report.uncertainty import group_intervals

NO_FIGURES = PaperFigures([], {}, Path("none.yaml"))


def _golds(count: int, full: bool = False, first: int = 0) -> list[GoldInstance]:
    """Questions q<first>..., hops 2, 3, 4 in turn; MuSiQue-Full: each with its unanswerable twin."""
    golds = []
    for index in range(first, first + count):
        for answerable in (True, False) if full else (True,):
            golds.append(
                GoldInstance(len(golds), f"q{index}", ("red apple",), (0, 1), range(6), answerable, 2 + index % 3)
            )
    return golds


def _predictions(golds: list[GoldInstance], skill: float, seed: int) -> list[Prediction]:
    """Right answers on about `skill` of the questions, half the support right, answerability right 9 times in 10."""
    draw = random.Random(seed)
    return [
        Prediction(
            gold.id,
            draw.choice(["red apple", "apple"]) if draw.random() < skill else "pear",
            [0, draw.choice([1, 2])],
            gold.answerable if draw.random() < 0.9 else not gold.answerable,
        )
        for gold in golds
    ]


def _run(root: Path, name: str, model: str, dataset: str, seed: int, golds, predictions, rows: bool = True) -> Path:
    """A finished run folder as train.py leaves it (`rows=False`: one made before runs kept per-question scores)."""
    folder = root / name
    folder.mkdir(parents=True)
    config = {"model_name": model, "seed": seed, "eval_split": "dev", "eval_size": None}
    config["dataset"] = {"name": dataset, "sample": True, "train_size": 20000}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    write_json(folder / "status.json", {"status": "finished"})
    write_report(evaluate_predictions(golds, predictions), folder / "metrics.json")
    if not rows:
        (folder / "metrics.per_question.jsonl").unlink()
    return folder


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.per_question.jsonl").read_text().splitlines()]


def _dire_scoring(run: Path, golds: list[GoldInstance], predictions: list[Prediction]) -> Path:
    """`evaluate.py run=RUN mode=dire`'s folder: probes right on the first half of the questions."""
    probes = [
        (2 * index + probe, ProbePrediction(g.id, probe, "red apple" if index % 2 else "pear", 0.5, [probe]))
        for index, g in enumerate(golds)
        for probe in (0, 1)
    ]
    folder = run / "evaluations" / "musique_ans-dev-dire-half"
    folder.mkdir(parents=True)
    write_report(dire_report(golds, predictions, probes, "probes.jsonl"), folder / "metrics.json")
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """SA (seeds 1 and 2), EE and Q-only (no per-question scores) on the same 40 MuSiQue-Ans questions; 1-Para on 30
    others, 20 of them shared; EE and SA on the same 30 MuSiQue-Full pairs; a DiRe scoring of SA's seed 1."""
    root = tmp_path_factory.mktemp("runs")
    ans, full, others = _golds(40), _golds(30, full=True), _golds(30, first=20)
    sa_1 = _predictions(ans, 0.7, seed=1)
    folders = {
        "sa_1": _run(root, "sa_1", "select_answer", "musique_ans", 1, ans, sa_1),
        "sa_2": _run(root, "sa_2", "select_answer", "musique_ans", 2, ans, _predictions(ans, 0.7, seed=2)),
        "ee": _run(root, "ee", "end2end", "musique_ans", 1, ans, _predictions(ans, 0.3, seed=3)),
        "q_only": _run(root, "q_only", "q_only", "musique_ans", 1, ans, _predictions(ans, 0.1, 4), rows=False),
        "one_para": _run(root, "one_para", "one_para", "musique_ans", 1, others, _predictions(others, 0.5, 5)),
        "ee_full": _run(root, "ee_full", "end2end", "musique_full", 1, full, _predictions(full, 0.3, seed=6)),
        "sa_full": _run(root, "sa_full", "select_answer", "musique_full", 1, full, _predictions(full, 0.7, seed=7)),
    }
    folders["dire"] = _dire_scoring(folders["sa_1"], ans, sa_1)
    return folders


@pytest.fixture(scope="module")
def report(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    records, _ = find_run_folders([runs["sa_1"].parent])
    return write_the_report(records, tmp_path_factory.mktemp("report"))


def _cell(interval, values: list[float]) -> str:
    text = f"{100 * sum(values) / len(values):.1f} [{100 * interval.low:.1f}, {100 * interval.high:.1f}]"
    if len(values) > 1:
        mean = 100 * sum(values) / len(values)
        std = (sum((100 * v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
        text += f" ± {std:.1f} (n={len(values)})"
    return text


def _metrics(folder: Path) -> dict[str, float]:
    return json.loads((folder / "metrics.json").read_text())


def test_every_cell_with_per_question_scores_gets_its_interval(runs: dict[str, Path], report: Path) -> None:
    rows = {row["system"]: row for row in parse_markdown_table((report / "table.md").read_text())}
    seeds = [_rows(runs["sa_1"]), _rows(runs["sa_2"])]
    averaged = metric_intervals_over_seeds(seeds)
    an = [_metrics(runs[name])["answer_f1"] for name in ("sa_1", "sa_2")]
    assert rows["SA [sample]"]["MuSiQue-Ans An"] == _cell(averaged["answer_f1"], an)
    # the interval is over questions of the seed-averaged scores: narrower than the spread of two single seeds'
    alone = [metric_intervals(rows)["answer_f1"] for rows in seeds]
    assert averaged["answer_f1"].low > min(interval.low for interval in alone)
    ee = metric_intervals(_rows(runs["ee"]))
    assert rows["EE [sample]"]["MuSiQue-Ans Sp"] == _cell(ee["support_f1"], [_metrics(runs["ee"])["support_f1"]])
    full = metric_intervals(_rows(runs["ee_full"]))  # over the 30 twin pairs
    assert full["group_answer_sufficiency_f1"].count == 30
    for column, key in (("Sf", "sufficiency_f1"), ("An+Sf", "group_answer_sufficiency_f1")):
        value = [_metrics(runs["ee_full"])[key]]
        assert rows["EE [sample]"][f"MuSiQue-Full {column}"] == _cell(full[key], value)
    # a run without per-question scores keeps its plain cell
    assert rows["Q-only [sample]"]["MuSiQue-Ans An"] == f"{100 * _metrics(runs['q_only'])['answer_f1']:.1f}"
    table = (report / "table.md").read_text()
    assert "A cell `47.3 [45.4, 49.2]` is the mean and its 95% percentile-bootstrap interval over questions" in table
    assert "MuSiQue-Full: the twin pair" in table and "2000 resamples, seed 0" in table


def test_per_hop_and_dire_cells_get_their_intervals(runs: dict[str, Path], report: Path) -> None:
    tables = (report / "per_hop.md").read_text().split("\n## ")
    ee = parse_markdown_table(next(section for section in tables if section.startswith("EE [sample] on MuSiQue-Ans")))
    intervals = metric_intervals(_rows(runs["ee"]))
    answer = next(row for row in ee if row["metric"] == "answer_f1")
    assert answer["3hop"] == _cell(intervals["answer_f1_3hop"], [_metrics(runs["ee"])["answer_f1_3hop"]])
    assert next(row for row in ee if row["metric"] == "count")["all"] == "40"
    dire_rows = parse_markdown_table((report / "dire.md").read_text())
    dire = metric_intervals(_rows(runs["dire"]))
    scored = _metrics(runs["dire"])
    for row in dire_rows:
        if row["metric"] in ("dire_answer_f1", "dire_joint_f1", "support_f1"):
            assert row["all"] == _cell(dire[row["metric"]], [scored[row["metric"]]]), row["metric"]
    assert dire["dire_answer_f1"].count == 40 and {row["metric"] for row in dire_rows} >= {"dire_answer_f1"}


def test_significance_md_tests_every_two_groups_on_the_same_questions(runs: dict[str, Path], report: Path) -> None:
    text = (report / "significance.md").read_text()
    assert "2000 resamples, seed 0" in text and "paired percentile-bootstrap interval over questions" in text
    sections = text.split("\n## ")
    ans = parse_markdown_table(next(s for s in sections if s.startswith("MuSiQue-Ans")))
    sa, ee = [_rows(runs["sa_1"]), _rows(runs["sa_2"])], [_rows(runs["ee"])]
    tests = paired_metric_tests_over_seeds(ee, sa, ["answer_f1", "support_f1"])
    assert [(row["A"], row["B"], row["metric"]) for row in ans] == [
        ("EE [sample]", "SA [sample]", "An"),
        ("EE [sample]", "SA [sample]", "Sp"),
    ]
    for row, key in zip(ans, ("answer_f1", "support_f1"), strict=True):
        test = tests[key]
        assert row["A - B"] == test.difference.text() and row["n"] == "40"
        assert row["p"] == ("<0.001" if test.p_value < 0.001 else f"{test.p_value:.3f}")
        assert row["A mean"] == f"{100 * _metrics(runs['ee'])[key]:.1f}"
    assert tests["answer_f1"].difference.excludes_zero() and tests["answer_f1"].p_value < 0.01  # 0.3 against 0.7
    full = parse_markdown_table(next(s for s in sections if s.startswith("MuSiQue-Full")))
    assert [row["metric"] for row in full] == ["An", "Sp", "Sf", "An+Sf", "Sp+Sf"]
    assert {row["n"] for row in full} == {"30"}  # twin pairs
    not_compared = next(s for s in sections if s.startswith("Not compared"))
    assert (
        "- EE [sample] and 1-Para [sample] (MuSiQue-Ans): scored on other questions (40 and 30 questions, 20 in common)"
        in not_compared
    )
    assert "- EE [sample] and Q-only [sample] (MuSiQue-Ans): no per-question scores for Q-only [sample]" in not_compared


def test_the_latex_table_and_the_png_show_the_intervals(runs: dict[str, Path], report: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tex = (report / "table.tex").read_text()
    ee = metric_intervals(_rows(runs["ee"]))["answer_f1"]
    expected = f"{100 * ee.mean:.1f}\\,{{\\scriptsize [{100 * ee.low:.1f}, {100 * ee.high:.1f}]}}"
    row = next(line for line in tex.splitlines() if line.startswith("EE [sample] &"))
    assert row.split(" & ")[1] == expected
    assert "$\\pm$" in next(line for line in tex.splitlines() if line.startswith("SA [sample] &"))
    body = re.sub(r"%.*", "", tex)  # a LaTeX comment may hold anything
    assert body.count("{") == body.count("}") and "\\begin{tabular}" in body and "\\end{tabular}" in body
    png = (report / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"

    records, _ = find_run_folders([runs["sa_1"].parent])
    groups = [group for group in group_runs(records) if group.dataset == "musique_ans"]
    figure, axes = plt.subplots()
    draw_report(axes, groups, NO_FIGURES)
    from matplotlib.container import BarContainer

    bars = {}
    for container in [c for c in axes.containers if isinstance(c, BarContainer)]:  # one bar each, with its error bar
        (x0, y0), (_, y1) = container.errorbar.lines[2][0].get_segments()[0]
        bars[round(float(x0), 2)] = (float(y0), float(y1))
    for position, group in enumerate(groups):
        interval = group_intervals(group).get("answer_f1")
        low, high = bars[round(position - 0.19, 2)]
        if interval is None:  # Q-only: one seed, no per-question scores: no error bar
            assert low == high
        else:
            assert (low, high) == pytest.approx((100 * interval.low, 100 * interval.high)), group.row_label
    assert "bootstrap interval over questions" in axes.get_title()
    plt.close(figure)


def test_a_system_that_names_no_support_has_no_support_cell_and_no_support_test(tmp_path: Path) -> None:
    # Q-only's registry entry says `predicts_support: false`: the evaluator's 0 support F1 is not a measurement
    full = _golds(30, full=True)
    no_support = [
        Prediction(p.id, p.predicted_answer, [], p.predicted_answerable) for p in _predictions(full, 0.2, seed=8)
    ]
    q_only = _run(tmp_path / "runs", "q_only", "q_only", "musique_full", 1, full, no_support)
    _run(tmp_path / "runs", "sa", "select_answer", "musique_full", 1, full, _predictions(full, 0.7, seed=9))
    assert _metrics(q_only)["support_f1"] == 0.0  # the evaluator scores what it is given
    records, _ = find_run_folders([tmp_path / "runs"])
    report = write_the_report(records, tmp_path / "report")
    rows = {row["system"]: row for row in parse_markdown_table((report / "table.md").read_text())}
    assert rows["Q-only [sample]"]["MuSiQue-Full Sp"] == "–" and rows["Q-only [sample]"]["MuSiQue-Full Sp+Sf"] == "–"
    assert rows["Q-only [sample]"]["MuSiQue-Full An"].startswith(f"{100 * _metrics(q_only)['answer_f1']:.1f} [")
    assert rows["SA [sample]"]["MuSiQue-Full Sp"] != "–"
    section = (report / "significance.md").read_text().split("\n## MuSiQue-Full")[1]
    tested = [row["metric"] for row in parse_markdown_table(section.split("\n## ")[0])]
    assert tested == ["An", "Sf", "An+Sf"]
