"""End2End training throughput at longformer-base shapes on one GPU (random weights; nothing is downloaded).

Model: `LongformerModel` with the longformer-base config (12 layers, 768 hidden, 12 heads, attention window 512,
4,098 positions, vocabulary 50,265, pad id 1) plus End2End-style heads: span start/end logits over every token and
a support logit per paragraph marker. Each input: 4,000 random tokens (padded by the model to 4,096, a multiple
of the window), global attention on the first 30 tokens (the question) and on 20 paragraph markers spread over the
rest. Training step: bf16 autocast, gradient checkpointing (non-reentrant), loss = start CE + end CE + support BCE,
backward, AdamW step. For each batch size: `--warmup` steps (not timed), then up to `--steps` timed steps.
Reports step time (median), questions/s, tokens/s (real, unpadded tokens) and peak memory
(`torch.cuda.max_memory_allocated`). A hard time guard stops measuring before `--budget-s` (counted from the
start of the script) and still writes what was measured; results are rewritten after every batch size.

On the GPU machine (one H200; ~1-2 minutes, the guard keeps it under --budget-s=240 s of measuring):

    python benchmarks/gpu_end2end_throughput.py --device cuda --batch-sizes 1 2 4 --budget-s 240

JSON goes to $OUT/gpu_end2end.json when OUT is set, else to --json PATH (if given). CPU smoke test (tiny shapes:
2 layers, 64 hidden, window 64, 512 tokens, 2 timed steps):

    python benchmarks/gpu_end2end_throughput.py --device cpu --tiny --json /tmp/gpu_end2end.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

STARTED = time.perf_counter()

import torch  # noqa: E402
from torch import nn  # noqa: E402

FULL = {
    "num_hidden_layers": 12,
    "hidden_size": 768,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "attention_window": 512,
    "max_position_embeddings": 4098,
    "vocab_size": 50265,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "type_vocab_size": 1,
}
OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
TINY = {
    **FULL,
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "intermediate_size": 256,
    "attention_window": 64,
    "max_position_embeddings": 514,
    "vocab_size": 1000,
}


class End2EndHeads(nn.Module):
    """Longformer + span start/end head over tokens + support head over paragraph markers."""

    def __init__(self, config) -> None:
        super().__init__()
        from transformers import LongformerModel

        self.encoder = LongformerModel(config, add_pooling_layer=False)
        self.span = nn.Linear(config.hidden_size, 2)
        self.support = nn.Linear(config.hidden_size, 1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self.encoder(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            global_attention_mask=batch["global_attention_mask"],
        ).last_hidden_state  # (B, T, H)
        start_logits, end_logits = self.span(hidden).float().unbind(-1)  # (B, T) each
        markers = hidden.gather(1, batch["marker_positions"][..., None].expand(-1, -1, hidden.shape[-1]))
        support_logits = self.support(markers).squeeze(-1).float()  # (B, M)
        return (
            nn.functional.cross_entropy(start_logits, batch["start"])
            + nn.functional.cross_entropy(end_logits, batch["end"])
            + nn.functional.binary_cross_entropy_with_logits(support_logits, batch["support"])
        )


def make_batch(
    batch_size: int, seq_len: int, question_len: int, markers: int, vocab_size: int, device: torch.device, seed: int = 0
) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab_size, (batch_size, seq_len), generator=generator)  # no pad (1), bos, eos
    marker_positions = torch.linspace(question_len, seq_len - 1, markers + 1)[:-1].long()  # spread over the rest
    marker_positions = marker_positions.expand(batch_size, -1).contiguous()  # (B, M)
    global_mask = torch.zeros_like(ids)
    global_mask[:, :question_len] = 1
    global_mask.scatter_(1, marker_positions, 1)
    start = torch.randint(question_len, seq_len - 8, (batch_size,), generator=generator)
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "global_attention_mask": global_mask,
        "marker_positions": marker_positions,
        "start": start,
        "end": start + torch.randint(0, 8, (batch_size,), generator=generator),
        "support": (torch.rand(batch_size, markers, generator=generator) < 0.2).float(),
    }
    return {name: tensor.to(device) for name, tensor in batch.items()}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _elapsed() -> float:
    return time.perf_counter() - STARTED


def measure(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, torch.Tensor],
    args,
    device: torch.device,
    dtype: torch.dtype | None,
) -> dict:
    """Warm-up then timed training steps on one batch; stops early when the next step would cross the budget."""
    batch_size, seq_len = batch["input_ids"].shape
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    times: list[float] = []
    warmup_times: list[float] = []
    stopped = None
    for index in range(args.warmup + args.steps):
        last = (times or warmup_times or [0.0])[-1]
        if _elapsed() + 1.5 * last + args.reserve_s > args.budget_s:
            stopped = f"time guard at {_elapsed():.0f} s"
            break
        _sync(device)
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = model(batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        (warmup_times if index < args.warmup else times).append(time.perf_counter() - start)
        if not torch.isfinite(loss.detach()).item():
            stopped = f"non-finite loss {loss.item()}"
            break
    result = {
        "batch_size": batch_size,
        "tokens_per_question": seq_len,
        "warmup_step_s": warmup_times,
        "step_times_s": times,
        "timed_steps": len(times),
        "stopped": stopped,
    }
    if device.type == "cuda":
        result["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        result["peak_reserved_gib"] = torch.cuda.max_memory_reserved(device) / 2**30
    if times:
        step = statistics.median(times)
        result.update(
            step_s=step,
            mean_step_s=statistics.fmean(times),
            questions_per_s=batch_size / step,
            tokens_per_s=batch_size * seq_len / step,
            final_loss=loss.item(),
        )
    return result


def enable_checkpointing(encoder: nn.Module) -> None:
    """Non-reentrant activation checkpointing of every layer (the transformers 5 name, else the older one)."""
    if hasattr(encoder, "activation_checkpointing_enable"):
        encoder.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if not any(getattr(module, "gradient_checkpointing", False) for module in encoder.modules()):
        raise RuntimeError("gradient checkpointing did not switch on")


def _write(results: dict, path: Path | None) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes for a CPU smoke test")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--seq-len", type=int, help="tokens per question (default 4000; 512 with --tiny)")
    parser.add_argument("--question-len", type=int, default=30)
    parser.add_argument("--markers", type=int, default=20)
    parser.add_argument("--warmup", type=int, help="untimed steps per batch size (default 3; 1 with --tiny)")
    parser.add_argument("--steps", type=int, help="timed steps per batch size (default 10; 2 with --tiny)")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="autocast dtype (fp32: none)")
    parser.add_argument("--budget-s", type=float, default=240.0, help="stop measuring before this many seconds")
    parser.add_argument("--reserve-s", type=float, default=5.0, help="seconds kept back for writing results")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (CPU runs only)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    tiny = args.tiny
    args.seq_len = args.seq_len or (512 if tiny else 4000)
    args.warmup = args.warmup if args.warmup is not None else (1 if tiny else 3)
    args.steps = args.steps if args.steps is not None else (2 if tiny else 10)
    out = os.environ.get("OUT")
    path = Path(out) / "gpu_end2end.json" if out else args.json

    import transformers
    from transformers import LongformerConfig

    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)  # 1 by default: steady on a shared machine
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    shapes = TINY if tiny else FULL
    if args.seq_len + 2 > shapes["max_position_embeddings"]:
        parser.error(f"--seq-len {args.seq_len} exceeds {shapes['max_position_embeddings'] - 2} positions")
    config = LongformerConfig(**shapes)
    torch.manual_seed(0)
    model = End2EndHeads(config).to(device).train()
    enable_checkpointing(model.encoder)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, fused=device.type == "cuda")
    dtype = torch.bfloat16 if args.dtype == "bf16" else None
    results = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "tiny": tiny,
        "autocast": args.dtype,
        "gradient_checkpointing": True,
        "optimizer": "AdamW",
        "config": shapes,
        "parameters": sum(p.numel() for p in model.parameters()),
        "seq_len": args.seq_len,
        "global_tokens": args.question_len + args.markers,
        "warmup_steps": args.warmup,
        "steps": args.steps,
        "budget_s": args.budget_s,
        "setup_s": _elapsed(),
        "runs": [],
    }
    for batch_size in args.batch_sizes:
        if _elapsed() + args.reserve_s > args.budget_s:
            results["runs"].append({"batch_size": batch_size, "stopped": "time guard before start"})
            continue
        batch = make_batch(batch_size, args.seq_len, args.question_len, args.markers, shapes["vocab_size"], device)
        try:
            run = measure(model, optimizer, batch, args, device, dtype)
        except OUT_OF_MEMORY as error:  # record and go on to the next size
            optimizer.zero_grad(set_to_none=True)
            run = {"batch_size": batch_size, "stopped": f"out of memory: {str(error)[:200]}"}
        del batch
        results["runs"].append(run)
        results["wall_s"] = _elapsed()
        _write(results, path)
        print(json.dumps({key: value for key, value in run.items() if not key.endswith("times_s")}), flush=True)
    results["wall_s"] = _elapsed()
    _write(results, path)

    header = f"{'batch':>5} {'step s':>8} {'questions/s':>12} {'tokens/s':>10} {'peak GiB':>9} {'steps':>5}  note"
    print(
        f"End2End training throughput ({'tiny' if tiny else 'longformer-base'} shapes, {results['device']}, "
        f"{args.seq_len} tokens, {'bf16 autocast' if dtype else 'fp32, no autocast'}, gradient checkpointing, AdamW)"
    )
    print(header)
    for run in results["runs"]:
        if "step_s" in run:
            peak = f"{run['peak_memory_gib']:.2f}" if "peak_memory_gib" in run else "-"
            print(
                f"{run['batch_size']:>5} {run['step_s']:>8.3f} {run['questions_per_s']:>12.2f} "
                f"{run['tokens_per_s']:>10,.0f} {peak:>9} {run['timed_steps']:>5}  {run['stopped'] or ''}"
            )
        else:
            print(f"{run['batch_size']:>5} {'-':>8} {'-':>12} {'-':>10} {'-':>9} {0:>5}  {run.get('stopped')}")
    print(f"wall {results['wall_s']:.1f} s; results in {path}" if path else f"wall {results['wall_s']:.1f} s")


if __name__ == "__main__":
    main()
