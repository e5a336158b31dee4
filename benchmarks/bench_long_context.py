"""Long-context cost: MiniLM converted to a 4,096-position Longformer (the `minilm_long` backbone: sliding window
256, or `--window`) versus the same weights
with full self-attention, measured side by side in one run (CPU, batch of 1, random token ids, attention mask).

Both models hold the pretrained all-MiniLM-L6-v2 weights and see identical position vectors: the Longformer is
made by `convert_to_longformer` (into a temporary folder); the full-attention model is a `BertModel` with the
source weights and its 512 learned positions repeated up to 4,096 by `extend_positions` (BERT's row i is the
Longformer's row i + 1, since Longformer positions start after its padding index). A short input (within half a
window) is checked to give the same hidden states in both before anything is timed.

A training step is forward + backward of a squared-activation loss (dropout on; no gradient checkpointing, so
activation memory shows how attention grows; no optimizer step). For each (model, length), two fresh subprocesses:
one runs a single step, and its peak resident memory above what it held after loading the model and the inputs is
"peak MB"; the other runs one warm-up step, then up to `--repeats` timed steps (fewer once they took
`--case-budget-s`), whose median is "step s" (see KEEP_FREED_MEMORY for its allocator settings). Growth from the
shortest to the longest length tells linear (4x for 1k -> 4k) from quadratic (16x) cost.

    python benchmarks/bench_long_context.py [--lengths 1024 2048 4096] [--repeats 3] [--case-budget-s 40]
        [--window 256] [--full-attention sdpa|eager] [--threads 2] [--allocator keep|system] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

MAX_POSITIONS = 4096
# glibc hands every freed block above its mmap threshold (32 MB at most) back to the kernel and page-faults it in
# again on the next step; on a VM that kernel time swamps the arithmetic (a 2,048-token Longformer step measured
# 8.4 s wall, of which 4.9 s system time). These settings make glibc keep and reuse freed memory, like a caching
# allocator, so step times measure compute. Only the timing processes use them: peak memory is measured in a
# process of its own with glibc's defaults (keeping freed memory fragments the heap and inflates the peak ~10%).
KEEP_FREED_MEMORY = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}


def _minilm_folder() -> str:
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from musique_models import PROJECT_ROOT

    return instantiate(OmegaConf.load(PROJECT_ROOT / "conf/backbone/minilm.yaml")).model_dir()


def full_attention_model(source: str, max_positions: int, attn_implementation: str):
    """A `BertModel` with the source weights and a position table extended to `max_positions` exactly as the
    Longformer conversion extends it (BERT row i == Longformer row pad_token_id + 1 + i)."""
    from transformers import BertConfig, BertModel

    from musique_models.models.long_context import extend_positions

    source_model = BertModel.from_pretrained(source, add_pooling_layer=False)
    config = BertConfig.from_pretrained(
        source, max_position_embeddings=max_positions, attn_implementation=attn_implementation
    )
    model = BertModel(config, add_pooling_layer=False)
    state = {
        name: tensor
        for name, tensor in source_model.state_dict().items()
        if not name.endswith(("position_ids", "token_type_ids"))
    }
    key = "embeddings.position_embeddings.weight"
    pad = config.pad_token_id or 0
    state[key] = extend_positions(state[key], 0, max_positions, pad)[pad + 1 :]
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any(not name.endswith(("position_ids", "token_type_ids")) for name in missing):
        raise RuntimeError(f"full-attention model: missing {missing}, unexpected {unexpected}")
    return model


def _quiet() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def _load(kind: str, folder: str, attn_implementation: str):
    """Both models load the same way (`from_pretrained` of a saved folder), so memory after loading is comparable."""
    from transformers import BertModel, LongformerModel

    if kind == "longformer":
        return LongformerModel.from_pretrained(folder, add_pooling_layer=False)
    return BertModel.from_pretrained(folder, add_pooling_layer=False, attn_implementation=attn_implementation)


def _inputs(length: int, vocab_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    # ids >= 1000: no [PAD] (0) among them, so Longformer numbers positions 1..length exactly as BERT numbers 0..
    ids = torch.randint(1000, vocab_size, (1, length), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def check_same_function(longformer_dir: str, full_dir: str, attn_implementation: str, length: int = 200) -> float:
    """Max |difference| of the two models' last hidden states (eval mode) on an input within half a window, after
    checking that their position tables hold the same vectors."""
    longformer = _load("longformer", longformer_dir, attn_implementation).eval()
    full = _load("full", full_dir, attn_implementation).eval()
    lf_table = longformer.embeddings.position_embeddings.weight[1 : 1 + MAX_POSITIONS]
    if not torch.equal(lf_table, full.embeddings.position_embeddings.weight):
        raise RuntimeError("position tables differ between the Longformer and the full-attention model")
    batch = _inputs(length, full.config.vocab_size)
    with torch.no_grad():
        return (longformer(**batch).last_hidden_state - full(**batch).last_hidden_state).abs().max().item()


def _rss_kb() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def worker(
    phase: str,
    kind: str,
    length: int,
    repeats: int,
    case_budget_s: float,
    folder: str,
    attn_implementation: str,
    threads: int,
) -> dict:
    """One (model, length) case in a process of its own. phase "memory": one training step, whose peak resident
    memory above what the process held after loading the model and the inputs is the result (glibc defaults, so
    freed memory goes back to the kernel and the mark is the true peak). phase "time": one warm-up step, then
    timed steps."""
    _quiet()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = _load(kind, folder, attn_implementation).train()
    batch = _inputs(length, model.config.vocab_size)

    def step() -> float:
        start = time.perf_counter()
        hidden = model(**batch).last_hidden_state
        hidden.pow(2).mean().backward()
        elapsed = time.perf_counter() - start
        model.zero_grad(set_to_none=True)
        return elapsed

    if phase == "memory":
        rss_before = _rss_kb()
        max_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        first_step_s = step()
        max_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # the step's peak must exceed the loading peak for the figure to be exact (else it is a lower bound)
        return {
            "peak_mb": (max_after - rss_before) / 1024,
            "peak_exact": max_after > max_before,
            "loaded_rss_mb": rss_before / 1024,
            "memory_run_step_s": first_step_s,
        }
    warmup_s = step()
    times: list[float] = []
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    while len(times) < repeats and (not times or sum(times) < case_budget_s):
        times.append(step())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "warmup_s": warmup_s,
        "step_times_s": times,
        "step_s": statistics.median(times),
        "user_cpu_s_per_step": (usage.ru_utime - usage_before.ru_utime) / len(times),
        "system_cpu_s_per_step": (usage.ru_stime - usage_before.ru_stime) / len(times),
        "page_faults_per_step": (usage.ru_minflt - usage_before.ru_minflt) / len(times),
    }


def _run_case(kind: str, length: int, args: argparse.Namespace, folder: str) -> dict:
    case = {
        "model": kind,
        "tokens": length,
        "attention": f"sliding window {args.window}" if kind == "longformer" else f"full ({args.full_attention})",
    }
    for phase in ("memory", "time"):
        command = [
            sys.executable,
            __file__,
            "--_worker",
            phase,
            kind,
            str(length),
            "--repeats",
            str(args.repeats),
            "--case-budget-s",
            str(args.case_budget_s),
            "--full-attention",
            args.full_attention,
            "--threads",
            str(args.threads),
            "--_folder",
            folder,
        ]
        env = {name: value for name, value in os.environ.items() if name not in KEEP_FREED_MEMORY}
        if phase == "time" and args.allocator == "keep":
            env.update(KEEP_FREED_MEMORY)
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            case["error"] = f"{phase}: exit {result.returncode}: {result.stderr[-2000:]}"
            return case
        case.update(json.loads(result.stdout.strip().splitlines()[-1]))
    return case


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=3, help="timed steps after the warm-up (at most)")
    parser.add_argument(
        "--case-budget-s",
        type=float,
        default=40.0,
        help="stop repeating a case once its timed steps took this long (at least one step)",
    )
    parser.add_argument(
        "--full-attention",
        choices=["sdpa", "eager"],
        default="sdpa",
        help="BERT attention kernel (sdpa is what transformers uses by default)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=2,
        help="torch threads per case (use 1 on a machine other jobs share: idle-waiting OpenMP "
        "threads slow every op down when a core is taken)",
    )
    parser.add_argument(
        "--allocator",
        choices=["keep", "system"],
        default="keep",
        help="keep: glibc reuses freed memory (see KEEP_FREED_MEMORY); system: glibc defaults",
    )
    parser.add_argument(
        "--window", type=int, default=None, help="attention window (default: that of conf/backbone/minilm_long.yaml)"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--_worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--_folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._worker:
        phase, kind, length = args._worker
        print(
            json.dumps(
                worker(
                    phase,
                    kind,
                    int(length),
                    args.repeats,
                    args.case_budget_s,
                    args._folder,
                    args.full_attention,
                    args.threads,
                )
            )
        )
        return
    if max(args.lengths) > MAX_POSITIONS:
        parser.error(f"lengths must be at most {MAX_POSITIONS}")

    from rich.console import Console
    from rich.table import Table

    from musique_models.models.long_context import convert_to_longformer

    _quiet()
    torch.set_num_threads(args.threads)
    if args.window is None:
        from omegaconf import OmegaConf

        from musique_models import PROJECT_ROOT

        args.window = int(OmegaConf.load(PROJECT_ROOT / "conf/backbone/minilm_long.yaml").attention_window)
    check_tokens = min(200, args.window // 2)
    started = time.perf_counter()
    source = _minilm_folder()
    cases: dict[tuple[str, int], dict] = {}
    with tempfile.TemporaryDirectory() as folder:
        longformer_dir = str(convert_to_longformer(source, Path(folder) / "minilm-long", MAX_POSITIONS, args.window))
        full_dir = Path(folder) / "minilm-full-4096"
        full_attention_model(source, MAX_POSITIONS, args.full_attention).save_pretrained(full_dir)
        same = check_same_function(longformer_dir, str(full_dir), args.full_attention, check_tokens)
        folders = {"longformer": longformer_dir, "full": str(full_dir)}
        for length in args.lengths:
            for kind in ("longformer", "full"):
                cases[kind, length] = _run_case(kind, length, args, folders[kind])
    wall = time.perf_counter() - started

    table = Table(
        title=f"MiniLM at long inputs: Longformer (window {args.window}) vs full attention "
        f"({args.full_attention}); CPU, {args.threads} thread(s), batch 1, forward + backward"
    )
    for column in [
        "tokens",
        "longformer step s",
        "full-attention step s",
        "time full/LF",
        "longformer peak MB",
        "full peak MB",
        "memory full/LF",
    ]:
        table.add_column(column, justify="right")
    rows = []
    for length in args.lengths:
        lf, full = cases["longformer", length], cases["full", length]
        row = {
            "tokens": length,
            "longformer_step_s": lf.get("step_s"),
            "full_step_s": full.get("step_s"),
            "longformer_peak_mb": lf.get("peak_mb"),
            "full_peak_mb": full.get("peak_mb"),
        }
        row["time_ratio_full_over_longformer"] = _ratio(row["full_step_s"], row["longformer_step_s"])
        row["memory_ratio_full_over_longformer"] = _ratio(row["full_peak_mb"], row["longformer_peak_mb"])
        rows.append(row)
        table.add_row(
            f"{length:,}",
            _fmt(row["longformer_step_s"], ".2f"),
            _fmt(row["full_step_s"], ".2f"),
            _fmt(row["time_ratio_full_over_longformer"], ".2f", "x"),
            _fmt(row["longformer_peak_mb"], ",.0f"),
            _fmt(row["full_peak_mb"], ",.0f"),
            _fmt(row["memory_ratio_full_over_longformer"], ".2f", "x"),
        )
    growth = {}
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        label = f"{last['tokens'] / first['tokens']:g}x tokens"
        growth = {
            "tokens_factor": last["tokens"] / first["tokens"],
            "longformer_time": _ratio(last["longformer_step_s"], first["longformer_step_s"]),
            "full_time": _ratio(last["full_step_s"], first["full_step_s"]),
            "longformer_memory": _ratio(last["longformer_peak_mb"], first["longformer_peak_mb"]),
            "full_memory": _ratio(last["full_peak_mb"], first["full_peak_mb"]),
        }
        table.add_section()
        table.add_row(
            f"growth {first['tokens']:,}->{last['tokens']:,} ({label})",
            _fmt(growth["longformer_time"], ".1f", "x"),
            _fmt(growth["full_time"], ".1f", "x"),
            "",
            _fmt(growth["longformer_memory"], ".1f", "x"),
            _fmt(growth["full_memory"], ".1f", "x"),
            "",
        )
    Console(width=160).print(table)
    errors = [case for case in cases.values() if "error" in case]
    inexact = [f"{case['model']}@{case['tokens']}" for case in cases.values() if case.get("peak_exact") is False]
    print(
        f"same hidden states on a {check_tokens}-token input: max |diff| = {same:.2e}; wall {wall:.0f} s"
        + (f"; peak is a lower bound for {', '.join(inexact)}" if inexact else "")
    )
    print(
        f"threads {args.threads}, allocator {args.allocator}; CPU s per timed step (user/system): "
        + ", ".join(
            f"{case['model']}@{case['tokens']} {case['user_cpu_s_per_step']:.2f}/{case['system_cpu_s_per_step']:.2f}"
            for case in cases.values()
            if "error" not in case
        )
    )
    for case in errors:
        print(f"FAILED {case['model']} at {case['tokens']} tokens: {case['error']}")
    results = {
        "rows": rows,
        "growth": growth,
        "cases": [cases[key] for key in cases],
        "max_abs_diff_short": same,
        "window": args.window,
        "full_attention": args.full_attention,
        "threads": args.threads,
        "allocator": args.allocator,
        "wall_s": wall,
    }
    print(json.dumps(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
