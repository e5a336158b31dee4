from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from musique_models.data.formats import FORMATS
from musique_models.data.source import DatasetSource
from musique_models.errors import DatasetNotFoundError, MusiqueModelsError, user_error_message
from tests.conftest import SAMPLES


def _source(tmp_path: Path, **kwargs) -> DatasetSource:
    settings = {
        "name": "hotpotqa_20k",
        "display_name": "HotpotQA (distractor)",
        "format": "hotpotqa",
        "files": {"train": "hotpot_train_v1.1.json", "dev": "hotpot_dev_distractor_v1.json"},
        "data_dir": str(tmp_path / "data"),
        "cache_dir": str(tmp_path / "cache"),
        "sample_files": {"dev": str(SAMPLES / "hotpotqa/dev.json")},
        "download_help": "https://hotpotqa.github.io",
    }
    settings.update(kwargs)
    return DatasetSource(**settings)


def test_missing_official_file_says_where_to_get_it_and_how_to_use_the_sample(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as error:
        _source(tmp_path).load("dev")
    message = str(error.value)
    assert str(tmp_path / "data" / "hotpot_dev_distractor_v1.json") in message
    assert "https://hotpotqa.github.io" in message and "dataset.sample=true" in message


def test_sample_switch_reads_the_shipped_sample(tmp_path: Path) -> None:
    dev = _source(tmp_path, sample=True).load("dev")
    assert len(dev) == 53 and dev[0]["id"] == "5a8b57f25542995d1e6f1371"


def test_second_load_uses_the_arrow_cache_and_content_changes_invalidate_it(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "data").mkdir()
    official = tmp_path / "data" / "hotpot_dev_distractor_v1.json"
    shutil.copy(SAMPLES / "hotpotqa/dev.json", official)
    source = _source(tmp_path)
    first = source.load("dev")
    cached = list((tmp_path / "cache").glob("*.arrow"))
    assert len(cached) == 1

    def _fail(*args, **kwargs):
        raise AssertionError("parsed again although the cache is valid")

    monkeypatch.setattr(FORMATS["hotpotqa"], "read", _fail)
    again = source.load("dev")
    assert again["id"] == first["id"] and again["paragraphs"] == first["paragraphs"]
    monkeypatch.undo()

    official.write_text(official.read_text().replace("Scott Derrickson", "Scott Derrickson Jr."))
    changed = source.load("dev")
    assert len(list((tmp_path / "cache").glob("*.arrow"))) == 2
    assert "Scott Derrickson Jr." in changed[0]["paragraphs"][1]["text"] + changed[0]["paragraphs"][3]["text"]


def test_url_download_path_with_a_local_file_url(tmp_path: Path) -> None:
    url = (SAMPLES / "hotpotqa/dev.json").resolve().as_uri()
    source = _source(tmp_path, urls={"dev": url})
    assert len(source.load("dev")) == 53
    assert (tmp_path / "data" / "hotpot_dev_distractor_v1.json").read_bytes() == (
        SAMPLES / "hotpotqa/dev.json"
    ).read_bytes()
    assert not [p for p in (tmp_path / "data").iterdir() if p.name.endswith(".part")]


def test_unknown_split_and_format(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="no split 'test'") as error:
        _source(tmp_path).path("test")
    assert isinstance(error.value, MusiqueModelsError)
    assert user_error_message(error.value) == (
        "dataset 'hotpotqa_20k' (official files) has no split 'test'; choose one of: dev, train"
    )
    with pytest.raises(ValueError, match="unknown format 'squad'; set dataset.format to one of: musique") as error:
        _source(tmp_path, format="squad")
    assert isinstance(error.value, MusiqueModelsError)
    with pytest.raises(MusiqueModelsError, match="dataset.sample='yes' is not a boolean"):
        _source(tmp_path, sample="yes")


def test_missing_file_message_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as error:
        _source(tmp_path).load("dev")
    assert "\n" not in str(error.value)


def test_settings_only_the_configs_read_are_accepted_but_not_stored(tmp_path: Path) -> None:
    source = _source(tmp_path, include_title=True, yes_no_answers=True)
    for unread in ("include_title", "yes_no_answers"):
        assert not hasattr(source, unread)


def test_dead_code_stays_removed() -> None:
    from musique_models.data import schema
    from musique_models.evaluation import metrics

    assert not hasattr(schema, "DATASET_FORMATS") and not hasattr(metrics, "answer_scores_single")
