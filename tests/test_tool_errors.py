"""Every command-line tool answers a user's mistake with one line `error: ...` and exit status 2, never a traceback
or Hydra's multi-line report."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from musique_models import PROJECT_ROOT
from tests.conftest import SAMPLES, run_python

GOLD = str(SAMPLES / "musique_full/dev_derived.jsonl")
PREDICTIONS = str(SAMPLES / "musique_full/dev_derived.jsonl")  # never read: each case fails before
EVALUATE = [str(PROJECT_ROOT / "evaluate.py")]
PROBE = ["-m", "musique_models.data.probe", "dataset=hotpotqa_20k", "dataset.sample=true"]
SUMMARY = ["-m", "musique_models.data.summary"]
CONTRAST = ["-m", "musique_models.data.contrast"]

# (arguments after the python executable, a key word of the message); {tmp} is the test's temporary folder.
CASES = {
    "evaluate-no-gold": ([*EVALUATE, f"predictions={PREDICTIONS}"], "gold=PATH"),
    "evaluate-no-predictions": ([*EVALUATE, f"gold={GOLD}"], "predictions=PATH"),
    "evaluate-dire-no-probes": (
        [*EVALUATE, "mode=dire", f"predictions={PREDICTIONS}", f"gold={GOLD}"],
        "probe_predictions=PATH",
    ),
    "evaluate-unknown-mode": ([*EVALUATE, "mode=foo", f"predictions={PREDICTIONS}", f"gold={GOLD}"], "mode=foo"),
    "evaluate-unknown-dataset": (
        [*EVALUATE, "dataset=foo", f"predictions={PREDICTIONS}", f"gold={GOLD}"],
        "dataset/foo",
    ),
    "evaluate-unknown-format": (
        [*EVALUATE, "format=musique_full", f"predictions={PREDICTIONS}", f"gold={GOLD}"],
        "use dataset=musique_full",
    ),
    "evaluate-run-only-option": (
        [*EVALUATE, f"predictions={PREDICTIONS}", f"gold={GOLD}", "split=test", "eval_size=5"],
        "split, eval_size apply to run= only",
    ),
    "evaluate-bad-override": (
        [*EVALUATE, "gold_file=x", f"predictions={PREDICTIONS}", f"gold={GOLD}"],
        "unknown key `gold_file`; did you mean `gold`?",
    ),
    "evaluate-missing-predictions-file": (
        [*EVALUATE, "predictions={tmp}/none.jsonl", f"gold={GOLD}"],
        "predictions file not found",
    ),
    "evaluate-dire-min-paragraphs-not-a-number": (
        [*EVALUATE, "mode=dire", f"predictions={PREDICTIONS}", f"gold={GOLD}", "dire_min_paragraphs=five"],
        "dire_min_paragraphs='five': expected a whole number",
    ),
    "evaluate-min-paragraphs-without-dire": (
        [*EVALUATE, f"predictions={PREDICTIONS}", f"gold={GOLD}", "dire_min_paragraphs=5"],
        "applies to mode=dire only",
    ),
    "probe-unknown-partition": ([*PROBE, "out={tmp}/probe.json", "partition=halves"], "partition=halves"),
    "probe-bad-min-paragraphs": ([*PROBE, "out={tmp}/probe.json", "min_paragraphs=0"], "min_paragraphs=0: expected"),
    "probe-unknown-split": ([*PROBE, "out={tmp}/probe.json", "split=test"], "no split 'test'"),
    "probe-no-out": ([*PROBE], "out=PATH"),
    "probe-not-a-boolean": (
        [*PROBE[:-1], "dataset.sample=maybe", "out={tmp}/probe.json"],
        "dataset.sample=maybe: Value 'maybe' is not a valid bool",
    ),
    "contrast-missing-input": (
        [*CONTRAST, "--input", "{tmp}/missing.json", "--format", "musique", "--output", "{tmp}/out.jsonl"],
        "file not found",
    ),
    "summary-unknown-dataset": ([*SUMMARY, "dataset=foo"], "dataset/foo"),
    "summary-bad-override": (
        [*SUMMARY, "dataset.smaple=true"],
        "dataset.smaple: DatasetSettings has no such setting; did you mean `dataset.sample`?",
    ),
    "summary-unparsable-override": ([*SUMMARY, "foo"], "Error parsing override 'foo'"),
}


def run_tool(arguments: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """Run `python ARGUMENTS` from an empty working folder `tmp_path/cwd`, with caches and logs under `tmp_path`."""
    arguments = [argument.replace("{tmp}", str(tmp_path)) for argument in arguments]
    if arguments[0] != "-m" or "contrast" not in arguments[1]:  # the Hydra tools
        arguments += [f"paths.cache_dir={tmp_path}/cache", f"paths.log_dir={tmp_path}/logs"]
    (tmp_path / "cwd").mkdir()
    return run_python(arguments, cwd=tmp_path / "cwd", timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize(("arguments", "key_word"), list(CASES.values()), ids=list(CASES))
def test_user_errors_are_one_line_and_exit_2(arguments: list[str], key_word: str, tmp_path: Path) -> None:
    result = run_tool(arguments, tmp_path)
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and lines[0] != "error: ", result.stderr
    assert key_word in lines[0]
    # no Hydra run folder, .hydra/ or log file, even on failure: neither in the working folder nor under the logs
    assert not list((tmp_path / "cwd").iterdir()) and not (tmp_path / "logs").exists()
