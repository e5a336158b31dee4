"""What a stage says about its time (`StageClock`): the seconds a step takes once measured, with the training time
left, and each epoch's time with what is left at that pace; and the closing lines of a run on a shipped sample."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from pytorch_lightning.demos.boring_classes import BoringModel

from musique_models import PROJECT_ROOT
from musique_models.runs.closing import ranking_against_chance, sample_run_lines
from musique_models.training import progress
from musique_models.training.progress import StageClock, format_duration


class Clock:
    """`time.monotonic` of a machine where each training step takes 2 s and nothing else takes time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TwoSecondSteps(BoringModel):
    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock

    def training_step(self, batch, batch_idx):
        self.clock.now += 2.0
        return super().training_step(batch, batch_idx)


def test_a_stage_says_its_pace_and_the_time_left(tmp_path: Path, monkeypatch, caplog) -> None:
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    trainer = pl.Trainer(
        default_root_dir=str(tmp_path),
        max_epochs=3,
        limit_train_batches=8,
        limit_val_batches=0,
        callbacks=[StageClock("selector")],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    with caplog.at_level(logging.INFO, logger=progress.__name__):
        trainer.fit(TwoSecondSteps(clock))
    lines = [record.getMessage() for record in caplog.records if record.name == progress.__name__]
    # the clock starts after the first step: said once 5 steps (10 s) later, at step 6 of 24, with 18 steps left
    threads = torch.get_num_threads()
    assert lines == [
        f"stage selector: 2.00 s a training step with {threads} CPU thread(s); 18 steps left: about 36 s of training "
        "(validation and prediction come on top)",
        "stage selector: epoch 0 (1 of 3) done in 16 s; about 32 s left at that pace",
        "stage selector: epoch 1 (2 of 3) done in 16 s; about 16 s left at that pace",
        "stage selector: epoch 2 (3 of 3) done in 16 s",
    ]


def test_durations_read_as_a_person_writes_them() -> None:
    assert [format_duration(s) for s in (4.4, 59.6, 61, 3599, 3720)] == [
        "4 s",
        "1 min 0 s",
        "1 min 1 s",
        "59 min 59 s",
        "1 h 2 min",
    ]


def test_a_sample_run_ends_with_what_it_is_its_ranking_against_chance_and_what_comes_next(tmp_path: Path) -> None:
    # 30 questions of 20, 20 and 10 paragraphs; top 5: a random ranking reads 5/20, 5/20, 5/10 of the support
    rankings = [{"id": f"q{n}", "ranking": list(range((20, 20, 10)[n % 3]))} for n in range(30)]
    ranking_file = tmp_path / "selector_ranking.json"
    ranking_file.write_text(json.dumps({"top_k": 5, "rankings": rankings, "metrics": {"recall_at_5": 0.8}}))
    chance = (5 / 20 + 5 / 20 + 5 / 10) / 3
    assert ranking_against_chance(tmp_path) == (
        f"the selector put 80% of the supporting paragraphs in its top 5; a random ranking puts {100 * chance:.0f}% "
        "there (above chance)"
    )
    ranking_file.write_text(json.dumps({"top_k": 5, "rankings": rankings, "metrics": {"recall_at_5": 0.35}}))
    assert ranking_against_chance(tmp_path).endswith("(not clearly above chance)")
    few = {"top_k": 5, "rankings": rankings[:6], "metrics": {"recall_at_5": 0.8}}
    ranking_file.write_text(json.dumps(few))
    assert ranking_against_chance(tmp_path).endswith("(6 questions are too few to tell)")
    ranking_file.write_text(json.dumps({"top_k": 5, "rankings": rankings, "metrics": {"recall_at_5": 0.35}}))
    cfg = OmegaConf.create({"dataset": {"name": "musique_ans"}, "eval_split": "dev"})
    # a run that trained nothing (a prompted LLM) is not called a pipeline check of training
    assert sample_run_lines(cfg, tmp_path, 100, 200)[0].startswith(
        "Nothing was trained: the model answered 200 dev questions of the shipped musique_ans sample as it is"
    )
    (tmp_path / "selector").mkdir()
    (tmp_path / "selector" / "stage.json").write_text("{}")
    lines = sample_run_lines(cfg, tmp_path, 100, 200)
    assert lines[0].startswith(
        "This run is a pipeline check on the shipped musique_ans sample (100 training questions, 200 dev questions"
    )
    assert lines[1].startswith("The selector put 35% of the supporting paragraphs in its top 5")
    # with this interpreter's path: they work where no environment is active (after `make train`)
    assert f"{sys.executable} {PROJECT_ROOT / 'evaluate.py'} run={tmp_path}" in "\n".join(lines)
    assert f"{sys.executable} -m musique_models.report.browse {tmp_path}" in "\n".join(lines)
    ranking_file.unlink()  # a system without a selector: no ranking line
    assert not any(line.startswith("The selector") for line in sample_run_lines(cfg, tmp_path, 100, 200))
