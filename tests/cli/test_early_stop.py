"""A stop signal that comes after Hydra made the run folder but before it called `train.py`'s `main` (while it
writes its config copies and opens the log) leaves nothing behind: the stop handler notes the folder, since Hydra's
job forgets it on the way out. (tests/cli/test_resume.py sends real signals at a few moments; this is the moment
a real signal hits only now and then, made deterministic.)"""

from __future__ import annotations

import importlib.util
import signal
import sys
from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from musique_models import PROJECT_ROOT
from musique_models.training.stop import RunInterrupted, StopRequest


@pytest.fixture
def entry(monkeypatch: pytest.MonkeyPatch):
    spec = importlib.util.spec_from_file_location("train_entry", PROJECT_ROOT / "train.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "train_entry", module)
    spec.loader.exec_module(module)  # not as __main__: no handler is installed
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)
    return module


def _hydras_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text("a: 1\n")
    (folder / "train.log").write_text("")
    return folder


def test_the_folder_hydra_made_is_removed_when_the_stop_came_before_main(entry, tmp_path: Path) -> None:
    folder = _hydras_folder(tmp_path)
    HydraConfig.instance().cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(folder)}}})
    stop = StopRequest()
    stop.before_stop = entry.note_hydra_folder
    with pytest.raises(RunInterrupted, match="SIGINT received"):
        stop._handle(signal.SIGINT, None)  # at the signal, while Hydra's job still holds its config
    HydraConfig.instance().cfg = None  # Hydra's `finally` on the way out of the job
    entry.discard_hydra_folder()
    assert not folder.exists()


def test_without_the_note_the_folder_would_stay(entry, tmp_path: Path) -> None:
    folder = _hydras_folder(tmp_path)
    entry.discard_hydra_folder()  # Hydra has forgotten its job: nothing says which folder it made
    assert folder.exists()


def test_a_folder_holding_more_than_hydras_files_is_never_removed(entry, tmp_path: Path) -> None:
    folder = _hydras_folder(tmp_path)
    (folder / "notes.txt").write_text("a user's file\n")
    HydraConfig.instance().cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(folder)}}})
    entry.note_hydra_folder()
    HydraConfig.instance().cfg = None
    entry.discard_hydra_folder()
    assert (folder / "notes.txt").exists()
