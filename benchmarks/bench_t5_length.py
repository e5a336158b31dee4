"""What a longer input costs T5-large, the answerer of `experiment=sa_t5_<dataset>`: one encoder forward at 512, 1,024
and 2,048 input tokens and one training step (forward and backward, a 16-token target) up to `--step-max` tokens
(1,024: a 2,048-token fp32 step of T5-large does not fit this machine's 24 GiB), batch 1, side by side.

T5-large's architecture is built from its published sizes with random weights (nothing is downloaded): 24 encoder
and 24 decoder layers, d_model 1,024, d_ff 4,096, 16 heads of 64, 32 relative-position buckets. Each length runs in
its own process, so that its peak resident memory is its own. On the machine's CPU in fp32 (2 threads): the ratios
between lengths are the point, not the absolute times; a GPU in bf16 is far faster, with the same growth.

    python benchmarks/bench_t5_length.py [--lengths 512 1024 2048] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

T5_LARGE = {
    "d_model": 1024,
    "d_ff": 4096,
    "d_kv": 64,
    "num_heads": 16,
    "num_layers": 24,
    "num_decoder_layers": 24,
    "vocab_size": 32128,
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "dropout_rate": 0.0,
}


def measure(length: int, train_step: bool) -> dict:
    """One encoder forward (inference) and, with `train_step`, one training step at `length` input tokens, in this
    process."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(**T5_LARGE, decoder_start_token_id=0))
    input_ids = torch.randint(5, 32000, (1, length))
    labels = torch.randint(5, 32000, (1, 16))
    model.eval()
    with torch.inference_mode():
        start = time.perf_counter()
        model.encoder(input_ids=input_ids)
        forward_s = time.perf_counter() - start
    step_s = None
    if train_step:
        model.train()
        start = time.perf_counter()
        model(input_ids=input_ids, labels=labels).loss.backward()
        step_s = round(time.perf_counter() - start, 2)
    return {
        "tokens": length,
        "encoder_forward_s": round(forward_s, 2),
        "train_step_s": step_s,
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--step-max", type=int, default=1024, help="longest input also timed as a training step")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child process: measure one length
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.one <= args.step_max)))
        return
    rows = []
    for length in args.lengths:
        output = subprocess.run(
            [sys.executable, __file__, "--one", str(length), "--step-max", str(args.step_max)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        rows.append(json.loads(output.strip().splitlines()[-1]))
    base = rows[0]
    for row in rows:
        row["forward_vs_first"] = round(row["encoder_forward_s"] / base["encoder_forward_s"], 2)
        row["step_vs_first"] = round(row["train_step_s"] / base["train_step_s"], 2) if row["train_step_s"] else None
    print("| input tokens | encoder forward | vs the first | training step | vs the first | peak memory |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        step = f"{row['train_step_s']} s | {row['step_vs_first']}x" if row["train_step_s"] else "– | –"
        print(
            f"| {row['tokens']:,} | {row['encoder_forward_s']} s | {row['forward_vs_first']}x | {step} | "
            f"{row['peak_rss_gib']} GiB |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
