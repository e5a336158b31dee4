"""What a wandb run receives at its end (`log_run_results`): the final metrics in its summary, the per-hop metrics as
a table and the run's predictions.jsonl, metrics.json and metrics.per_question.jsonl as an artifact of type
`predictions`, all kept offline in the run folder (read back here from the run's `.wandb` record file, as `wandb sync`
would)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

from wandb.proto import wandb_internal_pb2

from musique_models.runs.train import train
from musique_models.training.loggers import PER_HOP_TABLE_KEY, per_hop_rows
from tests.conftest import TINY_SELECT_ANSWER

BLOCK = 32768  # the .wandb file: a LevelDB-style log of protobuf records, in 32 KiB blocks, after a 7-byte header
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> Iterator[wandb_internal_pb2.Record]:
    """The records of an offline run's `run-<id>.wandb` file."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, pending = 7, b""
    while position + 7 <= len(data):
        if BLOCK - position % BLOCK < 7:  # a block's tail too short for a record header is padding
            position += BLOCK - position % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (FULL, FIRST):
            pending = chunk
        elif kind in (MIDDLE, LAST):
            pending += chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def test_per_hop_rows_follow_the_metrics_table() -> None:
    metrics = {"answer_f1": 0.5, "count": 4.0, "answer_f1_2hop": 0.25, "answer_f1_4hop": 1.0, "count_2hop": 3.0}
    assert per_hop_rows(metrics) == [["answer_f1", 0.5, 0.25, None, 1.0], ["count", 4.0, 3.0, None, None]]


def test_an_offline_wandb_run_keeps_final_metrics_per_hop_table_and_result_files(
    compose_train_cfg, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))  # artifact staging, outside the home folder
    cfg = compose_train_cfg([*TINY_SELECT_ANSWER, "trainer.fast_dev_run=true", "eval_size=3", "logger=wandb"])
    train(cfg)
    run = Path(cfg.paths.output_dir)
    metrics = json.loads((run / "metrics.json").read_text())
    (offline_run,) = (run / "wandb").glob("offline-run-*")
    run_id = (run / "wandb_run_id.txt").read_text().strip()
    records = list(wandb_records(offline_run / f"run-{run_id}.wandb"))

    summary: dict[str, object] = {}
    for record in records:
        if record.WhichOneof("record_type") == "summary":
            for item in record.summary.update:
                summary["/".join(item.nested_key) or item.key] = json.loads(item.value_json)
    for key, value in metrics.items():
        assert summary[f"test/{key}"] == value
    assert summary[f"{PER_HOP_TABLE_KEY}/_type"] == "table-file"
    table = json.loads((offline_run / "files" / summary[f"{PER_HOP_TABLE_KEY}/path"]).read_text())
    assert table["columns"] == ["metric", "all", "2hop", "3hop", "4hop"]
    assert table["data"] == per_hop_rows(metrics)
    assert ["answer_f1", metrics["answer_f1"], metrics["answer_f1_2hop"], metrics["answer_f1_3hop"], None] in table[
        "data"
    ]
    assert "answer_f1_4hop" not in metrics  # no 4-hop question among the run's: None in the table

    artifacts = [record.artifact for record in records if record.WhichOneof("record_type") == "artifact"]
    (results,) = [artifact for artifact in artifacts if artifact.type == "predictions"]
    assert results.name == f"predictions-{run_id}" and results.run_id == run_id
    files = {entry.path: entry for entry in results.manifest.contents}
    assert set(files) == {"predictions.jsonl", "metrics.json", "metrics.per_question.jsonl"}
    for name, entry in files.items():
        assert entry.size == (run / name).stat().st_size
        assert Path(entry.local_path).read_bytes() == (run / name).read_bytes()  # staged copy, uploaded by sync
