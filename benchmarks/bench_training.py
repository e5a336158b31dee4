"""Training-core overheads, each measured side by side in one run (MiniLM tokenizer and model, CPU):

1. Featurisation: the answerer featuriser through `featurize()` (batched `datasets.map`, labels, offsets, Arrow
   cache write) versus the raw fast tokenizer on the same (question, context) texts with the same windowing.
   Target: at least 0.8x the raw tokenizer's throughput.
2. A training step under Lightning versus a bare PyTorch loop (forward, loss, backward, clip, AdamW, scheduler)
   on the same model and batch. Target: Lightning overhead at most 5%.

    python benchmarks/bench_training.py [--questions 200] [--steps 30] [--json results.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from rich.console import Console
from rich.table import Table
from torch.utils.data import DataLoader, IterableDataset
from transformers import get_linear_schedule_with_warmup

from musique_models import PROJECT_ROOT
from musique_models.data.source import DatasetSource
from musique_models.features.answerer import featurize_answerer
from musique_models.features.context import build_context, ordered_paragraphs
from musique_models.models.answerer import MultiParagraphAnswerer
from musique_models.models.backbone import load_tokenizer
from musique_models.training.datamodule import featurize
from musique_models.training.loaders import PaddingCollator

MAX_LENGTH, STRIDE = 512, 128


def _table(questions: int, cache: str):
    source = DatasetSource(
        name="musique_ans",
        display_name="MuSiQue-Ans",
        format="musique",
        files={},
        data_dir="/",
        sample=True,
        cache_dir=cache,
        sample_files={"dev": str(PROJECT_ROOT / "data/samples/musique_ans/dev.jsonl")},
    )
    table = source.load("dev")
    table = table.select([i % len(table) for i in range(questions)])
    return table.add_column("selected_idxs", [[p["idx"] for p in ps][:7] for ps in table["paragraphs"]])


def bench_featurisation(tokenizer, table, folder: str) -> dict:
    questions = table["question"]
    contexts = [
        build_context(ordered_paragraphs(ps, sel), False)[0]
        for ps, sel in zip(table["paragraphs"], table["selected_idxs"])
    ]
    raw, ours = [], []
    for attempt in range(3):
        start = time.perf_counter()
        for begin in range(0, len(questions), 256):
            tokenizer(
                questions[begin : begin + 256],
                contexts[begin : begin + 256],
                truncation="only_second",
                max_length=MAX_LENGTH,
                stride=STRIDE,
                return_overflowing_tokens=True,
                return_offsets_mapping=True,
            )
        raw.append(time.perf_counter() - start)
        start = time.perf_counter()
        windows = featurize(
            table,
            featurize_answerer,
            tokenizer,
            f"{folder}/features{attempt}",
            "bench",
            max_length=MAX_LENGTH,
            stride=STRIDE,
            include_title=False,
        )
        ours.append(time.perf_counter() - start)
    raw_s, ours_s = statistics.median(raw), statistics.median(ours)
    return {
        "questions": len(questions),
        "windows": len(windows),
        "raw_tokenizer_s": raw_s,
        "featurize_s": ours_s,
        "raw_questions_per_s": len(questions) / raw_s,
        "featurize_questions_per_s": len(questions) / ours_s,
        "throughput_ratio": raw_s / ours_s,
    }


class _SameBatch(IterableDataset):
    def __init__(self, batch: dict, steps: int) -> None:
        self.batch, self.steps = batch, steps

    def __iter__(self):
        for _ in range(self.steps):
            yield self.batch


class _StepTimer(pl.Callback):
    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_start(self, *args) -> None:
        self.start = time.perf_counter()

    def on_train_batch_end(self, *args) -> None:
        self.times.append(time.perf_counter() - self.start)


def bench_training_step(tokenizer, table, backbone, steps: int, folder: str) -> dict:
    windows = featurize(
        table.select(range(8)),
        featurize_answerer,
        tokenizer,
        f"{folder}/step",
        "step",
        max_length=MAX_LENGTH,
        stride=STRIDE,
        include_title=False,
    )
    batch = PaddingCollator(tokenizer.pad_token_id)([windows[i] for i in range(4)])
    torch.manual_seed(0)
    reference = MultiParagraphAnswerer(backbone, len(tokenizer))
    warmup = 5

    # bare PyTorch: the same optimiser, schedule and clipping as QAModule + Trainer(gradient_clip_val=1.0)
    model = copy.deepcopy(reference).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    scheduler = get_linear_schedule_with_warmup(optimizer, steps // 10, steps + warmup)
    bare = []
    for step in range(steps + warmup):
        start = time.perf_counter()
        loss = model.loss(batch, model._outputs(batch))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= warmup:
            bare.append(time.perf_counter() - start)

    # Lightning: same model copy, same batch every step
    module = copy.deepcopy(reference)
    timer = _StepTimer()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps + warmup,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=1.0,
        callbacks=[timer],
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    loader = DataLoader(_SameBatch(batch, steps + warmup), batch_size=None)
    start = time.perf_counter()
    trainer.fit(module, train_dataloaders=loader)
    lightning_wall = time.perf_counter() - start
    lightning = timer.times[warmup:]
    bare_s, lightning_s = statistics.median(bare), statistics.median(lightning)
    return {
        "steps": steps,
        "batch_windows": len(batch["input_ids"]),
        "tokens_per_window": batch["input_ids"].shape[1],
        "bare_step_s": bare_s,
        "lightning_step_s": lightning_s,
        "lightning_overhead": lightning_s / bare_s - 1,
        "lightning_fit_wall_s": lightning_wall,
        "bare_total_s": sum(bare),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=400)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    backbone = instantiate(OmegaConf.load(PROJECT_ROOT / "conf/backbone/minilm.yaml"))
    tokenizer = load_tokenizer(backbone)
    with tempfile.TemporaryDirectory() as folder:
        table = _table(args.questions, folder)
        features = bench_featurisation(tokenizer, table, folder)
        step = bench_training_step(tokenizer, table, backbone, args.steps, folder)
    table_out = Table(title="Training core overheads (MiniLM, CPU, 1 process)")
    for column in ["measure", "ours", "reference", "ratio", "target"]:
        table_out.add_column(column, justify="right")
    table_out.add_row(
        "featurisation questions/s",
        f"{features['featurize_questions_per_s']:,.0f}",
        f"{features['raw_questions_per_s']:,.0f} (raw tokenizer)",
        f"{features['throughput_ratio']:.2f}x",
        ">= 0.80x",
    )
    table_out.add_row(
        "training step s (median)",
        f"{step['lightning_step_s']:.4f} (Lightning)",
        f"{step['bare_step_s']:.4f} (bare PyTorch)",
        f"{100 * step['lightning_overhead']:+.1f}%",
        "<= +5%",
    )
    Console(width=140).print(table_out)
    results = {"featurisation": features, "training_step": step}
    print(json.dumps(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
