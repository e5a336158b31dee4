"""torch CPU threads on a 2-core machine, idle and busy: one training step of the tiny and the MiniLM backbone.

    python benchmarks/bench_threads.py [--steps 8]

Each case runs in a fresh process (`torch.set_num_threads(N)` before anything else), times `--steps` training
steps (forward, backward, AdamW) after one warm-up step and reports the median. "busy" runs the same while one
other process spins on a core, as a second job, a test run or an editor's indexer does on a developer machine.
Side by side in one run; what `trainer.threads` defaults to follows from it (docs/training.md, Threads).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "tiny": {"backbone": "tiny", "batch": 8, "tokens": 256},
    "minilm": {"backbone": "minilm", "batch": 4, "tokens": 512},
}


def _step_times(backbone: str, batch: int, tokens: int, threads: int, steps: int) -> list[float]:
    import torch
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    torch.set_num_threads(threads)
    from musique_models.models.backbone import load_encoder

    spec = instantiate(OmegaConf.load(ROOT / f"conf/backbone/{backbone}.yaml"))
    model = load_encoder(spec, 30523)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1000, 2000, (batch, tokens), generator=generator)
    mask = torch.ones_like(input_ids)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        loss = model(input_ids=input_ids, attention_mask=mask).last_hidden_state.pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return times[1:]


def _spin(stop: multiprocessing.Event) -> None:
    while not stop.is_set():
        sum(range(10_000))


def _measure(case: str, threads: int, steps: int, busy: bool) -> float:
    stop = multiprocessing.Event()
    spinner = multiprocessing.Process(target=_spin, args=(stop,)) if busy else None
    if spinner:
        spinner.start()
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child", case, str(threads), str(steps)],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        ).stdout
    finally:
        stop.set()
        if spinner:
            spinner.join()
    return statistics.median(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, threads, steps = args.child[0], int(args.child[1]), int(args.child[2])
        print(json.dumps(_step_times(threads=threads, steps=steps, **CASES[case])))
        return
    print(f"cores: {os.cpu_count()}, steps per case: {args.steps} (median reported)")
    print("| model (batch x tokens) | machine | 1 thread s/step | 2 threads s/step | 2 threads / 1 thread |")
    print("|---|---|---|---|---|")
    for case, shape in CASES.items():
        for busy in (False, True):
            one = _measure(case, 1, args.steps, busy)
            two = _measure(case, 2, args.steps, busy)
            print(
                f"| {case} ({shape['batch']} x {shape['tokens']}) | {'busy' if busy else 'idle'} | {one:.3f} | "
                f"{two:.3f} | {two / one:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
