"""Run in each spawned process of the DDP metric test: score one rank's shard, sync, write the results."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch.distributed as dist
from torch.utils.data import DistributedSampler

from musique_models.evaluation.torchmetric import DireMetric, MultihopQAMetric


def run_rank(rank: int, world_size: int, port: int, cases: dict, output_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        results = {}
        for name, case in cases.items():
            golds, predictions = case["golds"], case["predictions"]
            # shuffle=False and an odd size make the sampler pad rank 1 with a repeat of row 0
            indices = list(DistributedSampler(range(len(golds)), num_replicas=world_size, rank=rank, shuffle=False))
            metric = MultihopQAMetric(golds)
            for start in range(0, len(indices), 7):
                batch = indices[start : start + 7]
                metric.update(
                    batch,
                    [predictions[i]["predicted_answer"] for i in batch],
                    [predictions[i]["predicted_support_idxs"] for i in batch],
                    [predictions[i]["predicted_answerable"] for i in batch],
                )
            results[name] = {key: value.item() for key, value in metric.compute().items()}
            if "probes" in case:
                dire = DireMetric(golds, data_format=case["data_format"])
                dire.update(
                    indices,
                    [predictions[i]["predicted_answer"] for i in indices],
                    [predictions[i]["predicted_support_idxs"] for i in indices],
                )
                probe_rows = list(
                    DistributedSampler(range(len(case["probes"])), num_replicas=world_size, rank=rank, shuffle=False)
                )
                probes = [case["probes"][i] for i in probe_rows]
                dire.update_probes(
                    [p["row"] for p in probes],
                    [p["probe"] for p in probes],
                    [p["predicted_answer"] for p in probes],
                    [p["predicted_answer_confidence"] for p in probes],
                    [p["predicted_support_idxs"] for p in probes],
                )
                results[name + "_dire"] = {key: value.item() for key, value in dire.compute().items()}
        Path(output_dir, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()
