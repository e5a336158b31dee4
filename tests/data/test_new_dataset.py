"""A new dataset in an existing format joins by one config plus its files: no code, no model config edited."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import InstantiationException
from hydra.utils import instantiate

from musique_models import PROJECT_ROOT
from musique_models.data.source import DatasetConfigError
from musique_models.data.subsample import evaluation_subset_indices
from musique_models.errors import RunConfigError, user_error_message
from musique_models.io import write_json
from musique_models.runs.train import train
from tests.conftest import SAMPLES, TINY_SELECT_ANSWER

DATASET_CONFIG = """\
defaults:
  - dataset_schema
  - _self_

_target_: musique_models.data.source.DatasetSource
name: hotpot_bridge
display_name: HotpotQA bridge questions
format: hotpotqa
data_dir: {data}
files: {{train: train.json, dev: dev.json}}
sample: false
paired: false
train_size: null
seed: ${{seed}}
cache_dir: ${{paths.cache_dir}}/datasets
include_title: true
yes_no_answers: true
"""


@pytest.mark.slow
def test_a_dataset_in_an_existing_format_joins_by_one_config(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for split, count in (("train", 8), ("dev", 5)):
        records = json.loads((SAMPLES / "hotpotqa" / f"{split}.json").read_text())
        write_json(data / f"{split}.json", [r for r in records if r["type"] == "bridge"][:count], indent=None)
    (tmp_path / "conf" / "dataset").mkdir(parents=True)
    (tmp_path / "conf" / "dataset" / "hotpot_bridge.yaml").write_text(DATASET_CONFIG.format(data=data))
    overrides = [
        *[override for override in TINY_SELECT_ANSWER if not override.startswith("dataset.")],
        f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
        "dataset=hotpot_bridge",
        "logger=none",
        f"paths.cache_dir={tmp_path}/cache",
        f"paths.output_dir={tmp_path}/run",
    ]
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    # the models do not list it: their `default` row of paper settings applies
    assert cfg.model.top_k == cfg.model.paper_settings.default.answerer_top_k == 7
    train(cfg)
    run = tmp_path / "run"
    assert json.loads((run / "status.json").read_text())["status"] == "finished"
    predictions = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    dev_ids = [record["_id"] for record in json.loads((data / "dev.json").read_text())]
    # eval_size=4: the same 4 of the 5 (all 2-hop HotpotQA questions) as any run takes, in file order
    assert [prediction["id"] for prediction in predictions] == [
        dev_ids[row] for row in evaluation_subset_indices(dev_ids, [2] * len(dev_ids), 4)
    ]
    metrics = json.loads((run / "metrics.json").read_text())
    assert 0.0 <= metrics["answer_f1"] <= 1.0 and 0.0 <= metrics["support_f1"] <= 1.0
    provenance = json.loads((run / "provenance.json").read_text())
    assert {Path(entry["path"]).name for entry in provenance["data"]["files"].values()} == {"train.json", "dev.json"}
    assert provenance["data"]["origin"] == "official" and provenance["data"]["files"]["train"]["rows"] == 8

    # it ships no sample: dataset.sample=true is refused in one line, by train.py and by the data commands alike
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        on_sample = compose(
            "train", overrides=[*overrides[:-1], f"paths.output_dir={tmp_path}/other", "dataset.sample=true"]
        )
    expected = "dataset 'hotpot_bridge' has no shipped sample (its config gives no sample_files)"
    with pytest.raises(RunConfigError, match=re.escape(expected)):
        train(on_sample)
    with pytest.raises(InstantiationException) as refused:  # what the data commands print: one line
        instantiate(on_sample.dataset)
    assert isinstance(refused.value.__cause__, DatasetConfigError)
    assert (user_error_message(refused.value) or "").startswith(expected)
