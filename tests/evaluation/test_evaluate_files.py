"""evaluate.py and the file-level evaluator on the shipped real samples, and every bad-prediction case."""

from __future__ import annotations

import json
import re
import string
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from musique_models import PROJECT_ROOT
from musique_models.data.formats import UnknownFormatError, read_examples
from musique_models.data.probe import make_probes, support_groups, write_probe_file
from musique_models.errors import DataFormatError
from musique_models.evaluation.evaluator import evaluate_dire_files, evaluate_files
from musique_models.evaluation.gold import read_gold
from musique_models.evaluation.predictions import (
    Prediction,
    ProbePrediction,
    read_predictions,
    write_2wiki_predictions,
    write_hotpotqa_predictions,
    write_predictions,
)
from tests.conftest import SAMPLES, run_python

FIXTURES = Path(__file__).parent.parent / "fixtures"
GOLD_FILES = [
    ("musique_ans/dev.jsonl", None),
    ("musique_ans/train.json", None),
    ("musique_full/dev_derived.jsonl", None),
    ("hotpotqa/dev.json", None),
    ("2wiki/dev.json", "2wiki"),
]


def _perfect(gold_path: Path, data_format: str | None = None) -> list[Prediction]:
    return [
        Prediction(g.id, g.answers[-1], list(g.support_idxs), g.answerable) for g in read_gold(gold_path, data_format)
    ]


@pytest.mark.parametrize(("relative", "data_format"), GOLD_FILES)
def test_perfect_predictions_score_one_on_every_shipped_sample(relative: str, data_format, tmp_path: Path) -> None:
    gold = SAMPLES / relative
    write_predictions(tmp_path / "p.jsonl", _perfect(gold, data_format))
    metrics = evaluate_files(tmp_path / "p.jsonl", gold, data_format).metrics
    expected_keys = {"answer_f1", "answer_em", "support_f1", "support_em"}
    if "full" in relative:
        expected_keys |= {
            "group_answer_sufficiency_f1",
            "group_support_sufficiency_f1",
            "sufficiency_accuracy",
            "sufficiency_f1",
            "group_answer_sufficiency_em",
            "group_support_sufficiency_em",
        }
    assert {key: metrics[key] for key in expected_keys} == {key: 1.0 for key in expected_keys}


def _reference_f1(prediction: str, gold: str) -> float:
    """An independent transcription of the SQuAD answer F1, used only to cross-check."""

    def norm(text: str) -> list[str]:
        text = "".join(c for c in text.lower() if c not in set(string.punctuation))
        return re.sub(r"\b(a|an|the)\b", " ", text).split()

    p, g = norm(prediction), norm(gold)
    if not p or not g:
        return float(p == g)
    same = sum((Counter(p) & Counter(g)).values())
    return 0.0 if same == 0 else 2 * same / (len(p) + len(g))


def test_real_xlnet_predictions_on_hotpotqa_dev(tmp_path: Path) -> None:
    predictions_path = FIXTURES / "hotpotqa_dev_dire_xlnet_predictions.jsonl"
    predicted = {p.id: p for _, p in read_predictions(predictions_path)}
    raw = [r for r in json.loads((SAMPLES / "hotpotqa/dev.json").read_text()) if r["_id"] in predicted]
    gold_path = tmp_path / "gold.json"
    gold_path.write_text(json.dumps(raw))
    metrics = evaluate_files(predictions_path, gold_path).metrics
    answer_f1 = [_reference_f1(predicted[r["_id"]].predicted_answer, r["answer"]) for r in raw]
    support_f1 = []
    for r in raw:
        gold_idx = {i for i, (title, _) in enumerate(r["context"]) if title in {t for t, _ in r["supporting_facts"]}}
        pred_idx = set(predicted[r["_id"]].predicted_support_idxs)
        tp = len(gold_idx & pred_idx)
        support_f1.append(2 * tp / (len(gold_idx) + len(pred_idx)) if tp else 0.0)
    assert metrics["count"] == len(raw) == 52
    assert metrics["answer_f1"] == pytest.approx(sum(answer_f1) / len(raw), abs=1e-12)
    assert metrics["support_f1"] == pytest.approx(sum(support_f1) / len(raw), abs=1e-12)
    assert 0.5 < metrics["answer_f1"] < 1.0 and 0.5 < metrics["support_f1"] < 1.0  # a real model, not perfect


def _write_lines(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _rows(gold: Path) -> list[dict]:
    return [
        json.loads(
            json.dumps(
                {
                    "id": p.id,
                    "predicted_answer": p.predicted_answer,
                    "predicted_support_idxs": p.predicted_support_idxs,
                    "predicted_answerable": p.predicted_answerable,
                }
            )
        )
        for p in _perfect(gold)
    ]


FULL = SAMPLES / "musique_full/dev_derived.jsonl"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda rows: rows.pop(3), "missing row: 1 rows for this id, the gold file has 2"),
        # both twins of one id gone: the id is named (rows 2 and 3 are one pair)
        (lambda rows: [rows.pop(2), rows.pop(2)], "1 gold ids have no prediction: '2hop__403712_793210' \\(the "),
        (lambda rows: rows.append({**rows[0], "id": "2hop__000_111"}), "not in the gold file: '2hop__000_111'"),
        (lambda rows: rows.__setitem__(slice(2, 6), [rows[4], rows[5], rows[2], rows[3]]), "wrong order"),
        (lambda rows: rows.insert(1, dict(rows[0])), "duplicate prediction: 3 rows for this id"),
        (lambda rows: rows[7].pop("predicted_answerable"), "missing required field `predicted_answerable`"),
        (lambda rows: rows[7].__setitem__("predicted_support_idxs", "3"), "Expected `array`, got `str`"),
        (
            lambda rows: rows[7].__setitem__("predicted_support_idxs", [3, 20]),
            r"idx \[20\] are not idx of this question",
        ),
        (lambda rows: rows[7].__setitem__("predicted_answer", 7), "Expected `str`, got `int`"),
    ],
)
def test_bad_predictions_raise_clear_errors(edit, message: str, tmp_path: Path) -> None:
    rows = _rows(FULL)
    edit(rows)
    with pytest.raises(DataFormatError, match=message):
        evaluate_files(_write_lines(tmp_path / "p.jsonl", rows), FULL)


def test_field_errors_name_line_id_and_field(tmp_path: Path) -> None:
    rows = _rows(FULL)
    rows[7]["predicted_support_idxs"] = "3"
    with pytest.raises(DataFormatError) as error:
        evaluate_files(_write_lines(tmp_path / "p.jsonl", rows), FULL)
    assert (error.value.line, error.value.record_id, error.value.field) == (8, rows[7]["id"], "predicted_support_idxs")


def test_full_predictions_need_two_rows_per_id(tmp_path: Path) -> None:
    rows = [row for row in _rows(FULL) if row["predicted_answerable"]]  # one row per id
    with pytest.raises(DataFormatError, match="MuSiQue-Full needs exactly two rows per id"):
        evaluate_files(_write_lines(tmp_path / "p.jsonl", rows), FULL)


def _run_evaluate(args: list[str], cwd: Path = PROJECT_ROOT) -> subprocess.CompletedProcess:
    return run_python([str(PROJECT_ROOT / "evaluate.py"), *args], cwd=cwd, timeout=120)


def test_evaluate_cli_writes_full_precision_metrics_and_per_question_rows(tmp_path: Path) -> None:
    rows = _rows(FULL)
    rows[0]["predicted_answer"] = "Stanley County"  # F1 2/3 on the first question
    rows[1]["predicted_answerable"] = True  # its unanswerable twin judged answerable: group scores 0
    predictions = _write_lines(tmp_path / "p.jsonl", rows)
    output = tmp_path / "out" / "scores_of_the_first_question_changed" / "metrics.json"
    result = _run_evaluate(
        [f"predictions={predictions}", f"gold={FULL}", f"output={output}", f"paths.log_dir={tmp_path}/logs"]
    )
    assert result.returncode == 0, result.stderr
    # printed paths are whole lines even on a pipe (rich would wrap them at 80 columns)
    assert len(str(output)) > 80 and f"\nmetrics: {output}\n" in result.stdout
    metrics = json.loads(output.read_text())
    assert metrics["answer_f1"] == (2 / 3 + 199) / 200  # exact: written at full precision
    assert metrics["group_answer_sufficiency_f1"] == 199 / 200
    assert metrics["sufficiency_accuracy"] == 399 / 400
    assert "group_answer_sufficiency_f1" in result.stdout and "answer_f1" in result.stdout
    per_question = [
        json.loads(line) for line in output.with_name("metrics.per_question.jsonl").read_text().splitlines()
    ]
    assert len(per_question) == 400 and per_question[0]["answer_f1"] == pytest.approx(2 / 3)
    # each row says what it counts toward: averaging the rows counted in An gives An (all 400 rows would halve it)
    assert per_question[0]["counts_toward"] == ["answer", "support", "answerability", "pair"]
    assert per_question[1]["counts_toward"] == ["answerability", "pair"]  # the unanswerable twin: not in An or Sp
    counted = [row["answer_f1"] for row in per_question if "answer" in row["counts_toward"]]
    assert sum(counted) / len(counted) == pytest.approx(metrics["answer_f1"])
    assert not (tmp_path / "logs").exists()  # no Hydra run folder


@pytest.mark.parametrize("layout", ["dataset=musique_full", "format=musique", None])
def test_evaluate_cli_writes_only_its_outputs_beside_the_predictions(layout: str | None, tmp_path: Path) -> None:
    (tmp_path / "preds").mkdir()
    predictions = _write_lines(tmp_path / "preds" / "p.jsonl", _rows(FULL))
    work = tmp_path / "work"  # the working directory: stays empty
    work.mkdir()
    result = _run_evaluate(
        [f"predictions={predictions}", f"gold={FULL}", f"paths.log_dir={tmp_path}/logs", *([layout] if layout else [])],
        cwd=work,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "preds" / "p.metrics.json").read_text())["group_answer_sufficiency_f1"] == 1.0
    assert sorted(path.name for path in (tmp_path / "preds").iterdir()) == [
        "p.jsonl",
        "p.metrics.intervals.json",
        "p.metrics.json",
        "p.metrics.per_question.jsonl",
    ]
    assert not (tmp_path / "logs").exists() and not list(work.iterdir())  # no run folder, .hydra/ or log file


@pytest.mark.slow
@pytest.mark.parametrize(
    ("gold", "layout", "message"),
    [
        (FULL, "dataset=musique_ans", "not paired: choose dataset=musique_full"),
        (SAMPLES / "musique_ans/dev.jsonl", "dataset=musique_full", "no gold row is unanswerable"),
        (FULL, "dataset=hotpotqa_20k", "not a HotpotQA record"),
        (FULL, "format=2wiki", "not a 2WikiMultihopQA record"),
        (FULL, "format=hotpotqa dataset=musique_full", "contradicts dataset=musique_full"),
    ],
)
def test_evaluate_cli_checks_the_gold_file_against_the_chosen_dataset(
    gold: Path, layout: str, message: str, tmp_path: Path
) -> None:
    predictions = _write_lines(tmp_path / "p.jsonl", _rows(FULL))
    result = _run_evaluate(
        [f"predictions={predictions}", f"gold={gold}", *layout.split(), f"paths.log_dir={tmp_path}/logs"]
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "p.metrics.json").exists()


def test_read_gold_pairing_and_format_options() -> None:
    assert len(read_gold(FULL, "musique", paired=True)) == len(read_gold(FULL)) == 400
    with pytest.raises(DataFormatError, match="not paired"):
        read_gold(FULL, "musique", paired=False)
    with pytest.raises(DataFormatError, match="no gold row is unanswerable"):
        read_gold(SAMPLES / "musique_ans/dev.jsonl", paired=True)
    with pytest.raises(UnknownFormatError, match="unknown gold format 'musique_full'; expected one of: musique"):
        read_gold(FULL, "musique_full")


def test_evaluate_cli_bad_predictions_exit_2_and_write_no_metrics(tmp_path: Path) -> None:
    rows = _rows(FULL)
    rows.pop(10)
    predictions = _write_lines(tmp_path / "p.jsonl", rows)
    output = tmp_path / "metrics.json"
    result = _run_evaluate(
        [f"predictions={predictions}", f"gold={FULL}", f"output={output}", f"paths.log_dir={tmp_path}/logs"]
    )
    assert result.returncode == 2 and "error:" in result.stderr and "Traceback" not in result.stderr
    assert not output.exists() and not list(tmp_path.glob("*.per_question.jsonl"))


def _probe_predictions(gold_path: Path, data_format: str, tmp_path: Path) -> Path:
    """Probe predictions: probe 0 answers right with low confidence, probe 1 wrong with high confidence on even
    rows, the reverse on odd rows; each probe predicts the supporting paragraphs it still has."""
    examples = read_examples(gold_path, data_format, data_format)
    rows = []
    for number, example in enumerate(examples):
        for probe_number, probe in enumerate(make_probes(example)):
            right = (probe_number == 0) == (number % 2 == 0)
            rows.append(
                ProbePrediction(
                    id=example.id,
                    probe=probe_number,
                    predicted_answer=example.answer if right else "wrong",
                    predicted_answer_confidence=0.3 if right else 0.7,
                    predicted_support_idxs=probe.supporting_idxs,
                )
            )
    path = tmp_path / "probe_predictions.jsonl"
    write_predictions(path, rows)
    return path


def test_dire_scores_on_the_hotpotqa_sample(tmp_path: Path) -> None:
    gold = SAMPLES / "hotpotqa/dev.json"
    predictions = tmp_path / "p.jsonl"
    write_predictions(predictions, _perfect(gold))
    report = evaluate_dire_files(gold, predictions, _probe_predictions(gold, "hotpotqa", tmp_path))
    # Even rows: the confident probe (1) is wrong -> DiRe answer 0; odd rows: the confident probe (0) is wrong too.
    assert report.metrics["dire_answer_f1"] == 0.0
    # The probes' supports together are the gold support: DiRe support 1, capped by the perfect original.
    assert report.metrics["dire_support_f1"] == 1.0 and report.metrics["dire_joint_f1"] == 0.0
    assert report.metrics["answer_f1"] == 1.0 and report.metrics["dire_count"] == 53
    assert "dire_skipped_count" not in report.metrics  # the skip is off by default


def test_dire_cli_on_musique_full_skips_unanswerable(tmp_path: Path) -> None:
    predictions = _write_lines(tmp_path / "p.jsonl", _rows(FULL))
    probes = []
    for example in read_examples(FULL, "musique", "musique_full"):
        if example.answerable:
            for number, probe in enumerate(make_probes(example)):
                probes.append(
                    {
                        "id": example.id,
                        "probe": number,
                        "predicted_answer": example.answer,
                        "predicted_answer_confidence": 0.5,
                        "predicted_support_idxs": probe.supporting_idxs,
                    }
                )
    probe_path = _write_lines(tmp_path / "probes.jsonl", probes)
    output = tmp_path / "dire.json"
    result = _run_evaluate(
        [
            "mode=dire",
            f"gold={FULL}",
            f"predictions={predictions}",
            f"probe_predictions={probe_path}",
            f"output={output}",
            f"paths.log_dir={tmp_path}/logs",
        ]
    )
    assert result.returncode == 0, result.stderr
    metrics = json.loads(output.read_text())
    assert metrics["dire_answer_f1"] == metrics["dire_support_f1"] == metrics["dire_joint_f1"] == 1.0
    assert metrics["dire_count"] == 200
    probes.pop()
    _write_lines(probe_path, probes)
    result = _run_evaluate(
        [
            "mode=dire",
            f"gold={FULL}",
            f"predictions={predictions}",
            f"probe_predictions={probe_path}",
            f"output={tmp_path}/x.json",
            f"paths.log_dir={tmp_path}/l",
        ]
    )
    assert result.returncode == 2 and "lack probe 0 or 1" in result.stderr and not (tmp_path / "x.json").exists()


def test_probe_partition_options() -> None:
    examples = read_examples(SAMPLES / "musique_ans/dev.jsonl", "musique", "musique_ans")
    four_hop = next(e for e in examples if e.num_hops == 4 and len(e.supporting_idxs) == 4)
    ordered = [s.paragraph_support_idx for s in four_hop.decomposition]
    assert support_groups(four_hop, "half") == (ordered[:2], ordered[2:])
    assert support_groups(four_hop, "first_vs_rest") == (ordered[:1], ordered[1:])
    assert support_groups(four_hop, "rest_vs_last") == (ordered[:3], ordered[3:])
    probe0, probe1 = make_probes(four_hop)
    assert {p.idx for p in probe0.paragraphs} == {p.idx for p in four_hop.paragraphs} - set(ordered[:2])
    assert probe1.supporting_idxs == sorted(ordered[:2])


@pytest.mark.parametrize(
    ("dataset", "relative", "data_format"),
    [
        ("musique_ans", "musique_ans/dev.jsonl", "musique"),
        ("hotpotqa", "hotpotqa/dev.json", "hotpotqa"),
        ("2wiki", "2wiki/dev.json", "2wiki"),
    ],
)
def test_probe_files_keep_original_idx_in_the_dataset_format(dataset, relative, data_format, tmp_path: Path) -> None:
    examples = read_examples(SAMPLES / relative, data_format, dataset)
    output = tmp_path / "probe.json"
    assert write_probe_file(examples, data_format, output) == 2 * len(examples)
    probes = read_examples(output, data_format, dataset)
    for number, example in enumerate(examples):
        for probe_number, probe in enumerate(probes[2 * number : 2 * number + 2]):
            removed = support_groups(example)[probe_number]
            by_idx = {p.idx: p for p in example.paragraphs}
            assert probe.id == example.id
            assert [p.idx for p in probe.paragraphs] == [p.idx for p in example.paragraphs if p.idx not in removed]
            assert all(by_idx[p.idx].title == p.title and by_idx[p.idx].text == p.text for p in probe.paragraphs)
            # our convention: the labels mark the supporting paragraphs the probe keeps (the other group)
            assert probe.supporting_idxs == sorted(support_groups(example)[1 - probe_number])
        if data_format == "2wiki":
            assert [s.question for s in probes[2 * number].decomposition] == [s.question for s in example.decomposition]
    text = output.read_text()
    rows = json.loads(text) if text.startswith("[") else [json.loads(line) for line in text.splitlines()]
    assert {row["support_labels"] for row in rows} == {"kept"} and [row["probe"] for row in rows[:2]] == [0, 1]
    # a probe file given where the original split belongs is named for what it is
    with pytest.raises(DataFormatError, match="this is a DiRe probe file .* gold= takes the original split"):
        read_gold(output)


def test_predictions_of_another_dataset_are_named_so(tmp_path: Path) -> None:
    predictions = _write_lines(tmp_path / "p.jsonl", _rows(FULL))  # MuSiQue-Full ids against HotpotQA's gold
    with pytest.raises(DataFormatError, match="none of the 200 prediction ids is in the gold file .* another dataset"):
        evaluate_files(predictions, SAMPLES / "hotpotqa" / "dev.json")


def test_predictions_of_some_of_the_questions_say_how_many_they_cover(tmp_path: Path) -> None:
    """A run's predictions with `eval_size` scored against the whole split: the line says what they cover and how
    to score a run's own questions."""
    rows = _rows(FULL)[:20]  # 10 questions, both twins
    with pytest.raises(
        DataFormatError,
        match=r"190 gold ids have no prediction: .* cover 10 of the gold file's 200 questions: .*evaluate.py run=RUN_DIR",
    ):
        evaluate_files(_write_lines(tmp_path / "p.jsonl", rows), FULL)


def test_the_docs_probe_prediction_rows_are_read_and_scored(tmp_path: Path) -> None:
    """The two probe-prediction rows of docs/evaluation.md are whole rows that `evaluate.py mode=dire` reads."""
    docs = (PROJECT_ROOT / "docs" / "evaluation.md").read_text()
    lines = [line.strip() for line in docs.splitlines() if line.strip().startswith('{"id": "2hop__574419_270105"')]
    assert len(lines) == 2
    rows = [json.loads(line) for line in lines]
    assert [row["probe"] for row in rows] == [0, 1]
    gold = tmp_path / "gold.jsonl"
    gold.write_text(next(line for line in (SAMPLES / "musique_ans" / "dev.jsonl").open() if rows[0]["id"] in line))
    original = _write_lines(
        tmp_path / "p.jsonl",
        [
            {
                "id": rows[0]["id"],
                "predicted_answer": "Stanley",
                "predicted_support_idxs": [1, 8],
                "predicted_answerable": True,
            }
        ],
    )
    report = evaluate_dire_files(gold, original, _write_lines(tmp_path / "probe.jsonl", rows))
    # probe 0 is the more confident: its answer (Stanley, right) counts; the probes' support is the union, [1, 8]
    assert report.metrics["dire_answer_f1"] == 1.0 and report.metrics["dire_support_f1"] == 1.0


def test_probe_tool_skips_questions_with_few_paragraphs_and_says_how_many(tmp_path: Path) -> None:
    output = tmp_path / "probe.json"
    result = run_python(
        [
            "-m",
            "musique_models.data.probe",
            "dataset=hotpotqa_20k",
            "dataset.sample=true",
            "split=dev",
            f"out={output}",
            "min_paragraphs=5",
            f"paths.cache_dir={tmp_path}/cache",
        ],
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    # the sample's 53 dev questions: one has 2 paragraphs
    assert "wrote 104 probe rows (52 questions)" in result.stdout
    assert "skipped 1 answerable question(s) with fewer than 5 paragraphs" in result.stdout
    rows = json.loads(output.read_text())
    assert SHORT_HOTPOTQA_QUESTION not in {row["_id"] for row in rows} and len({row["_id"] for row in rows}) == 52


# the shipped HotpotQA dev sample's only question with fewer than 5 paragraphs (it has 2)
SHORT_HOTPOTQA_QUESTION = "5abd259d55429924427fcf1a"


def test_dire_min_paragraphs_leaves_short_questions_out_and_counts_them(tmp_path: Path) -> None:
    gold = SAMPLES / "hotpotqa/dev.json"
    predictions = tmp_path / "p.jsonl"
    write_predictions(predictions, _perfect(gold))
    probes = _probe_predictions(gold, "hotpotqa", tmp_path)  # every question's, the short one's too: ignored
    output = tmp_path / "dire.json"
    arguments = ["mode=dire", f"gold={gold}", f"predictions={predictions}", f"probe_predictions={probes}"]
    result = _run_evaluate([*arguments, f"output={output}", "dire_min_paragraphs=5"])
    assert result.returncode == 0, result.stderr
    assert "DiRe skipped 1 answerable question(s) with fewer than 5 paragraphs" in result.stdout
    metrics = json.loads(output.read_text())
    assert metrics["dire_skipped_count"] == 1 and metrics["dire_count"] == 52 and metrics["count"] == 53
    rows = [json.loads(line) for line in output.with_name("dire.per_question.jsonl").read_text().splitlines()]
    skipped = [row for row in rows if row.get("dire_skipped")]
    assert [row["id"] for row in skipped] == [SHORT_HOTPOTQA_QUESTION] and "dire_answer_f1" not in skipped[0]
    # the probe file may lack the skipped questions' probes
    kept = [line for line in probes.read_text().splitlines() if SHORT_HOTPOTQA_QUESTION not in line]
    probes.write_text("\n".join(kept) + "\n")
    report = evaluate_dire_files(gold, predictions, probes, min_paragraphs=5)
    assert {key: report.metrics[key] for key in metrics} == metrics
    # off by default: every question, no count
    with pytest.raises(DataFormatError, match="1 answerable questions lack probe 0 or 1"):
        evaluate_dire_files(gold, predictions, probes)


def test_official_hotpotqa_and_2wiki_prediction_writers(tmp_path: Path) -> None:
    examples = read_examples(SAMPLES / "hotpotqa/dev.json", "hotpotqa", "hotpotqa")[:2]
    predictions = [Prediction(e.id, "x", e.supporting_idxs, True) for e in examples]
    write_hotpotqa_predictions(tmp_path / "hotpot.json", examples, predictions)
    written = json.loads((tmp_path / "hotpot.json").read_text())
    first = examples[0]
    expected_sp = [
        [first.paragraphs[i].title, s] for i in first.supporting_idxs for s in range(len(first.paragraphs[i].sentences))
    ]
    assert written["answer"] == {e.id: "x" for e in examples} and written["sp"][first.id] == expected_sp
    assert "evidence" not in written
    write_2wiki_predictions(tmp_path / "2wiki.json", examples, predictions)
    assert json.loads((tmp_path / "2wiki.json").read_text())["evidence"] == {e.id: [] for e in examples}


def test_a_count_is_an_integer_and_is_shown_as_it_is() -> None:
    from rich.console import Console

    from musique_models.evaluation.evaluator import is_count_metric, metrics_table

    assert is_count_metric("invalid_decompositions", 3) and is_count_metric("count", 0.0)
    assert not is_count_metric("answer_f1", 1.0) and not is_count_metric("flag", True)
    console = Console(width=120, record=True)
    console.print(metrics_table({"answer_f1": 0.5, "my_new_count_metric": 3, "another_score": 1.0}))
    text = console.export_text()
    assert "│ my_new_count_metric │     3 │" in text and "│ another_score       │ 100.0 │" in text
