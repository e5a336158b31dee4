"""What a paper-scale run costs, measured in one short run on one GPU: every component of the paper's grid at its
real size and shapes (random weights; nothing is downloaded), then the grid's projected GPU-hours.

The components are the plan's (`musique_models.plan`, from the composed configs of `experiment=paper_grid`, or of
the Hydra overrides given): each distinct (backbone, module, mode, batch, input shape) once, e.g. the RoBERTa-large
selector at 57 pairs of 302 tokens, the Longformer-large reader at 4 x 4,096 tokens (End2End) and 4 x 3,072 (SA's
answerer on 7 x 400 tokens), the BART-large decomposer and Q-only answerer, the T5-large answerer, Beam Retrieval's
DeBERTa-v3 retriever. Each is built from its backbone's published configuration (`PUBLISHED` below, each cited)
through the project's own modules where they take a configuration alone (`ParagraphSelector`, `End2EndReader`,
`BeamRetriever`; the seq2seq modules build their tokenizer from the hub, so the seq2seq models are transformers'
`AutoModelForSeq2SeqLM` with the stages' loss, label-smoothed cross-entropy).

Per component, with bf16 autocast (`--dtype`): `--warmup` untimed steps, then up to `--steps` timed ones.
- training step: forward, backward, AdamW step at the stage's micro-batch, with gradient checkpointing where the
  stage's config turns it on;
- prediction step: one batch under `torch.inference_mode` (seq2seq: generation of exactly the stage's target length,
  beam search where the stage uses it; Beam Retrieval: its hop-by-hop search).
Recorded: median step time, examples/s (rows a step / step time; the retriever: questions), tokens/s (tokens a
step reads / step time: rows x tokens; seq2seq: source + target tokens; the retriever: every hop input's tokens),
peak memory (`torch.cuda.max_memory_allocated`, reset per component; null on CPU, where `process_max_rss_gib` is the
whole process's peak RSS so far), and model FLOP utilisation: MFU = model FLOPs a step / step time / the device's
peak dense bf16 FLOP/s (`PEAK_BF16_FLOPS` by device name, or `--peak-tflops`; null when unknown, e.g. CPU). Model
FLOPs: 2 x N x tokens a forward pass (N: parameters outside the embedding tables; seq2seq: the encoder's on the
source tokens, the decoder's and the output layer's on the target tokens, x beams when generating), 3 x that for a
training step; no attention term, and checkpointing's recomputation is not counted (hardware FLOPs are higher).

Then the plan's steps times these step times: GPU-hours per job and for the grid, peak memory per job (the plan:
`python -m musique_models.plan experiment=paper_grid --throughput gpu_check.json` prints it again, per stage).

A hard time guard, counted from the start of the script, stops measuring before `--budget-s` and still writes what
was measured; out of memory is caught per component and recorded as `stopped`. Results are rewritten after every
component: --json PATH / --markdown PATH, or when they are not given $OUT/gpu_check.json and $OUT/gpu_check.md if OUT is set.

    python benchmarks/gpu_check.py --device cuda --json gpu_check.json --markdown gpu_check.md   # one GPU, < 8 min
    python benchmarks/gpu_check.py --device cpu --tiny --json /tmp/gpu_check.json                # smoke test, CPU

`--tiny` measures every component at tiny shapes (2 layers, 64 hidden, batch <= 2, <= 128 tokens, 4 candidates)
under its real key: a check that the script works, whose hours are no projection.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import resource
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402

from musique_models.io import atomic_open, write_json  # noqa: E402
from musique_models.models.backbone import BackboneSpec  # noqa: E402
from musique_models.models.beam_retriever import BeamQuestion, BeamRetriever  # noqa: E402
from musique_models.models.end2end import End2EndReader  # noqa: E402
from musique_models.models.selector import ParagraphSelector  # noqa: E402
from musique_models.plan import (  # noqa: E402
    PREDICT,
    TRAIN,
    Component,
    components,
    parse_throughput,
    plan_experiment,
    project,
)
from musique_models.plan.jobs import BEAM_QUESTION_TOKENS, BEAM_RETRIEVER, READER, SELECTOR, SEQ2SEQ  # noqa: E402
from musique_models.plan.projection import JOB_HEADERS, Projection, job_rows, missing_lines, table  # noqa: E402

OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


@dataclass(frozen=True)
class Published:
    """A backbone's published architecture: transformers' `model_type` and its configuration (`source`)."""

    model_type: str
    config: dict[str, Any]
    source: str


_ROBERTA_LARGE = {
    "vocab_size": 50265,
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "max_position_embeddings": 514,
    "type_vocab_size": 1,
    "layer_norm_eps": 1e-5,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
}
_DEBERTA_V3 = {
    "vocab_size": 128100,
    "max_position_embeddings": 512,
    "relative_attention": True,
    "position_buckets": 256,
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
    "pos_att_type": ["p2c", "c2p"],
    "position_biased_input": False,
    "max_relative_positions": -1,
    "type_vocab_size": 0,
    "layer_norm_eps": 1e-7,
    "pad_token_id": 0,
}
_T5_LARGE = {
    "vocab_size": 32128,
    "d_model": 1024,
    "d_kv": 64,
    "num_layers": 24,
    "num_decoder_layers": 24,
    "num_heads": 16,
    "relative_attention_num_buckets": 32,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
}
# The hub configurations (config.json) of the checkpoints the backbone configs name (conf/backbone/*.yaml: `path`).
PUBLISHED = {
    "roberta_large": Published("roberta", _ROBERTA_LARGE, "FacebookAI/roberta-large (Liu et al., 2019)"),
    "longformer_large": Published(
        "longformer",
        {**_ROBERTA_LARGE, "max_position_embeddings": 4098, "attention_window": 512, "sep_token_id": 2},
        "allenai/longformer-large-4096 (Beltagy et al., 2020)",
    ),
    "longformer_base": Published(
        "longformer",
        {
            **_ROBERTA_LARGE,
            "hidden_size": 768,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
            "max_position_embeddings": 4098,
            "attention_window": 512,
        },
        "allenai/longformer-base-4096 (Beltagy et al., 2020)",
    ),
    "bart_large": Published(
        "bart",
        {
            "vocab_size": 50265,
            "d_model": 1024,
            "encoder_layers": 12,
            "decoder_layers": 12,
            "encoder_attention_heads": 16,
            "decoder_attention_heads": 16,
            "encoder_ffn_dim": 4096,
            "decoder_ffn_dim": 4096,
            "max_position_embeddings": 1024,
            "pad_token_id": 1,
            "bos_token_id": 0,
            "eos_token_id": 2,
            "decoder_start_token_id": 2,
        },
        "facebook/bart-large (Lewis et al., 2020)",
    ),
    "t5_large": Published(
        "t5", {**_T5_LARGE, "d_ff": 4096, "feed_forward_proj": "relu"}, "google-t5/t5-large (Raffel et al., 2020)"
    ),
    "flan_t5_large": Published(
        "t5",
        {**_T5_LARGE, "d_ff": 2816, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
        "google/flan-t5-large (Chung et al., 2022)",
    ),
    "deberta_v3_base": Published(
        "deberta-v2",
        {
            **_DEBERTA_V3,
            "hidden_size": 768,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
        },
        "microsoft/deberta-v3-base (He et al., 2021)",
    ),
    "deberta_v3_large": Published(
        "deberta-v2",
        {
            **_DEBERTA_V3,
            "hidden_size": 1024,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "intermediate_size": 4096,
        },
        "microsoft/deberta-v3-large (He et al., 2021)",
    ),
}
# --tiny: the same architectures, 2 layers of 64 (the seq2seq ones: 2 + 2), a 1,000-token vocabulary.
_TINY_ENCODER = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}
TINY = {
    "roberta": _TINY_ENCODER,
    "longformer": {**_TINY_ENCODER, "attention_window": 32},
    "deberta-v2": {**_TINY_ENCODER, "position_buckets": 32},
    "bart": {
        "d_model": 64,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 128,
        "decoder_ffn_dim": 128,
    },
    "t5": {"d_model": 64, "d_kv": 32, "d_ff": 128, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 2},
}
TINY_VOCAB = 1000
# Peak dense (no sparsity) bf16 tensor-core FLOP/s by device name (first match wins): NVIDIA's datasheets.
PEAK_BF16_FLOPS = [
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
]


def _elapsed() -> float:
    return time.perf_counter() - STARTED


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---- building the modules -------------------------------------------------------------------------------------


@dataclass
class Built:
    """A component's module (the project's, or transformers' seq2seq model) and what the steps and FLOPs need."""

    module: nn.Module
    kind: str
    config: dict[str, Any]
    vocab_size: int


def architecture(backbone: str, tiny: bool) -> tuple[str, dict[str, Any]]:
    """(model_type, configuration) of a backbone: its published one, made tiny with `tiny`."""
    if backbone not in PUBLISHED:
        raise KeyError(f"no published configuration for backbone {backbone!r} (gpu_check.py: PUBLISHED)")
    published = PUBLISHED[backbone]
    config = dict(published.config)
    if tiny:
        config.update(TINY[published.model_type], vocab_size=TINY_VOCAB)
    return published.model_type, config


def build(backbone: str, kind: str, tiny: bool, device: torch.device) -> Built:
    """The module a component of `kind` runs, with random weights, on `device`."""
    model_type, config = architecture(backbone, tiny)
    # the span readers and selectors add one token, the paragraph marker, to the vocabulary
    vocab = config["vocab_size"] + (0 if kind == SEQ2SEQ else 1)
    config["vocab_size"] = vocab
    torch.manual_seed(0)
    with torch.device(device):  # weights initialised where they will run (fast on a GPU)
        if kind == SEQ2SEQ:
            from transformers import AutoConfig, AutoModelForSeq2SeqLM

            module: nn.Module = AutoModelForSeq2SeqLM.from_config(AutoConfig.for_model(model_type, **config))
        else:
            spec = BackboneSpec(name=backbone, source="random", model_type=model_type, config_overrides=config)
            if kind == SELECTOR:
                module = ParagraphSelector(spec, vocab)
            elif kind == READER:
                module = End2EndReader(spec, vocab, gradient_checkpointing=False)
            elif kind == BEAM_RETRIEVER:
                module = BeamRetriever(spec, vocab, cls_token_id=1, sep_token_id=2, pad_token_id=0)
            else:
                raise ValueError(f"unknown component kind {kind!r}")
    return Built(module.to(device), kind, config, vocab)


def set_checkpointing(built: Built, enabled: bool) -> None:
    """Switch non-reentrant activation (gradient) checkpointing of the encoder on or off, checked (the transformers 5
    names, else the older ones)."""
    model = built.module if built.kind == SEQ2SEQ else built.module.encoder
    if hasattr(model, "activation_checkpointing_enable"):
        if enabled:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.activation_checkpointing_disable()
    elif enabled:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()
    switched = any(getattr(module, "gradient_checkpointing", False) for module in model.modules())
    if switched != enabled:
        raise RuntimeError(f"gradient checkpointing did not switch {'on' if enabled else 'off'}")


def measured_shape(component: Component, tiny: bool) -> Component:
    """The shape measured: the component's own, or tiny (batch <= 2, <= 128 tokens (the retriever: 64), <= 4
    paragraphs, <= 8 target tokens, <= 2 beams, 2 hops)."""
    if not tiny:
        return component
    return replace(
        component,
        batch=min(component.batch, 2),
        tokens=min(component.tokens, 64 if component.kind == BEAM_RETRIEVER else 128),
        paragraphs=min(component.paragraphs, 4),
        target_tokens=min(component.target_tokens, 8),
        beams=min(component.beams, 2),
        hops=min(component.hops, 2),
    )


# ---- inputs and steps -----------------------------------------------------------------------------------------


def _ids(generator: torch.Generator, vocab: int, *shape: int) -> torch.Tensor:
    return torch.randint(3, vocab, shape, generator=generator)  # never padding, start or end ids


def make_inputs(built: Built, shape: Component, device: torch.device) -> Any:
    """A synthetic batch of `shape` for the component's module (token ids drawn at random)."""
    generator = torch.Generator().manual_seed(0)
    rows, tokens, vocab = shape.batch, shape.tokens, built.vocab_size
    if built.kind == SELECTOR:
        batch = {
            "input_ids": _ids(generator, vocab, rows, tokens),
            "attention_mask": torch.ones(rows, tokens, dtype=torch.long),
            "label": (torch.rand(rows, generator=generator) < 0.5).float(),
        }
    elif built.kind == READER:
        batch = reader_batch(generator, vocab, rows, tokens, max(shape.paragraphs, 1))
    elif built.kind == SEQ2SEQ:
        batch = {
            "input_ids": _ids(generator, vocab, rows, tokens),
            "attention_mask": torch.ones(rows, tokens, dtype=torch.long),
            "decoder_input_ids": _ids(generator, vocab, rows, shape.target_tokens),
            "labels": _ids(generator, vocab, rows, shape.target_tokens),
        }
    else:
        return beam_questions(generator, vocab, shape)
    return {name: tensor.to(device) for name, tensor in batch.items()}


def reader_batch(
    generator: torch.Generator, vocab: int, rows: int, tokens: int, markers: int
) -> dict[str, torch.Tensor]:
    """An End2End-style input: the question first (global attention), a marker per paragraph spread over the
    rest (global attention), a gold span and support labels."""
    question = min(30, tokens // 4)
    marker_positions = torch.linspace(question, tokens - 1, markers + 1)[:-1].long().expand(rows, -1).contiguous()
    global_attention = torch.zeros(rows, tokens, dtype=torch.long)
    global_attention[:, :question] = 1
    global_attention.scatter_(1, marker_positions, 1)
    offsets = torch.arange(tokens).expand(rows, -1)
    offsets = torch.stack([offsets.masked_fill(offsets < question, -1), offsets + 1], dim=-1)  # context tokens >= 0
    start = torch.randint(question, tokens - 8, (rows,), generator=generator)
    return {
        "input_ids": _ids(generator, vocab, rows, tokens),
        "attention_mask": torch.ones(rows, tokens, dtype=torch.long),
        "global_attention_mask": global_attention,
        "marker_positions": marker_positions,
        "marker_mask": torch.ones(rows, markers, dtype=torch.bool),
        "support_labels": (torch.rand(rows, markers, generator=generator) < 0.2).float(),
        "offset_mapping": offsets,
        "answerable": torch.ones(rows, dtype=torch.long),
        "start_position": start,
        "end_position": start + torch.randint(0, 8, (rows,), generator=generator),
    }


def beam_questions(generator: torch.Generator, vocab: int, shape: Component) -> list[BeamQuestion]:
    """Questions for Beam Retrieval: `paragraphs` candidates each as long as a hop's budget leaves room for
    (`beam_hop_inputs`), every candidate gold so that training searches every hop (a random model keeps no gold
    chain otherwise, and the search stops)."""
    question = min(BEAM_QUESTION_TOKENS, shape.tokens // 4)
    paragraph = (shape.tokens - 2 - question) // shape.hops
    candidates = list(range(shape.paragraphs))
    return [
        BeamQuestion(
            question=_ids(generator, vocab, question).tolist(),
            candidates=[_ids(generator, vocab, paragraph).tolist() for _ in candidates],
            idxs=candidates,
            gold=candidates,
            hops=shape.hops,
            row=row,
        )
        for row in range(shape.batch)
    ]


def training_loss(built: Built, inputs: Any, shape: Component, step: int) -> torch.Tensor:
    """The component's training loss on `inputs` (the stages' losses)."""
    module = built.module
    if built.kind == SELECTOR:
        logits = module(inputs["input_ids"], inputs["attention_mask"])
        return nn.functional.binary_cross_entropy_with_logits(logits.float(), inputs["label"])
    if built.kind == READER:
        return module.loss(inputs, module.batch_outputs(inputs))
    if built.kind == SEQ2SEQ:
        logits = module(
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            decoder_input_ids=inputs["decoder_input_ids"],
            use_cache=False,
        ).logits
        return nn.functional.cross_entropy(
            logits.flatten(0, 1).float(), inputs["labels"].flatten(), label_smoothing=0.1
        )
    losses = [module.search(question, shape.hops, random.Random(step))[1] for question in inputs]
    return torch.stack(losses).mean()


def prediction(built: Built, inputs: Any, shape: Component) -> Any:
    """The component's prediction on `inputs` (seq2seq: generation of exactly `target_tokens` tokens)."""
    module = built.module
    if built.kind == SELECTOR:
        return module(inputs["input_ids"], inputs["attention_mask"])
    if built.kind == READER:
        return module.batch_outputs(inputs)
    if built.kind == SEQ2SEQ:
        config = built.config
        return module.generate(
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            num_beams=shape.beams,
            do_sample=False,
            max_new_tokens=shape.target_tokens,
            min_new_tokens=shape.target_tokens,
            decoder_start_token_id=config["decoder_start_token_id"],
            eos_token_id=config["eos_token_id"],
            pad_token_id=config["pad_token_id"],
            use_cache=True,
        )
    return module.predict_chains(inputs)


# ---- FLOPs ----------------------------------------------------------------------------------------------------


def non_embedding_parameters(module: nn.Module) -> int:
    """Parameters outside the embedding tables (a lookup costs no multiply-adds)."""
    embedding = {id(p) for m in module.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    return sum(p.numel() for p in module.parameters() if id(p) not in embedding)


def model_flops(built: Built, shape: Component, mode: str, tokens_read: int) -> float:
    """Model FLOPs of one step (see the module docstring): 2 x N x tokens a forward pass, x 3 training."""
    module = built.module
    if built.kind == SEQ2SEQ:
        head = module.get_output_embeddings()
        decoder = non_embedding_parameters(module.get_decoder()) + head.in_features * head.out_features
        target = shape.target_tokens * (shape.beams if mode == PREDICT else 1)
        forward = 2 * shape.batch * (non_embedding_parameters(module.get_encoder()) * shape.tokens + decoder * target)
    else:
        forward = 2 * non_embedding_parameters(module) * tokens_read
    return float(forward * (3 if mode == TRAIN else 1))


def grid_compute(component: Component, steps: int) -> float:
    """About the FLOPs a component costs over the whole plan: steps x tokens x 12 x layers x width^2 (x 3 training),
    from its published configuration (what orders the measurements)."""
    if component.backbone not in PUBLISHED:
        return 0.0
    config = PUBLISHED[component.backbone].config
    width = config.get("hidden_size") or config["d_model"]
    layers = config.get("num_hidden_layers") or config.get("encoder_layers", 0) + config.get("decoder_layers", 0)
    layers = layers or config["num_layers"] + config["num_decoder_layers"]
    return steps * component.tokens_per_step * 12 * layers * width**2 * (3 if component.mode == TRAIN else 1)


def peak_flops(device: torch.device, given_tflops: float | None) -> tuple[float | None, str]:
    """The device's peak dense bf16 FLOP/s and where it comes from (None: unknown)."""
    if given_tflops:
        return given_tflops * 1e12, "--peak-tflops"
    if device.type != "cuda":
        return None, "not a GPU"
    name = torch.cuda.get_device_name(device)
    for marker, flops in PEAK_BF16_FLOPS:
        if marker in name:
            return flops, f"datasheet ({marker})"
    return None, f"unknown device {name!r} (give --peak-tflops)"


# ---- measuring ------------------------------------------------------------------------------------------------


def timed_steps(
    step: Callable[[int], Any], warmup: int, steps: int, args: argparse.Namespace, device: torch.device
) -> tuple[list[float], list[float], str | None]:
    """Warm-up then timed steps; stops before a step that would cross the time guard."""
    warmup_times: list[float] = []
    times: list[float] = []
    for index in range(warmup + steps):
        last = (times or warmup_times or [0.0])[-1]
        if _elapsed() + 1.5 * last + args.reserve_s > args.budget_s:
            return warmup_times, times, f"time guard at {_elapsed():.0f} s"
        _sync(device)
        start = time.perf_counter()
        step(index)
        _sync(device)
        (warmup_times if index < warmup else times).append(time.perf_counter() - start)
    return warmup_times, times, None


def measure(built: Built, component: Component, shape: Component, args: argparse.Namespace) -> dict[str, Any]:
    """Warm-up and timed steps of one component; its record (step times, rates, memory, FLOPs, MFU)."""
    device = args.device
    module = built.module
    dtype = torch.bfloat16 if args.dtype == "bf16" else None
    inputs = make_inputs(built, shape, device)
    if built.kind == BEAM_RETRIEVER:
        module.beam_size, module.max_length, module.label_order = shape.beams, shape.tokens, False
    counted = {"tokens": 0}
    counter = None
    if built.kind == BEAM_RETRIEVER:  # the search's inputs vary in length: count what the encoder reads

        def count(_: nn.Module, args_: tuple, kwargs: dict) -> None:
            counted["tokens"] += kwargs["input_ids"].numel()

        counter = module.encoder.register_forward_pre_hook(count, with_kwargs=True)
    optimizer = None
    losses: list[float] = []
    if component.mode == TRAIN:
        module.train()
        set_checkpointing(built, component.gradient_checkpointing)
        optimizer = torch.optim.AdamW(module.parameters(), lr=1e-5)

        def step(index: int) -> None:
            counted["tokens"] = 0
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                loss = training_loss(built, inputs, shape, index)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.detach())

    else:
        module.eval()

        def step(index: int) -> None:
            counted["tokens"] = 0
            with torch.inference_mode(), torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                prediction(built, inputs, shape)

    try:
        warmup_times, times, stopped = timed_steps(step, args.warmup, args.steps, args, device)
    finally:
        if counter is not None:
            counter.remove()
        optimizer = None  # its state goes before the next component  # noqa: F841
    record: dict[str, Any] = {
        **component.as_dict(),
        "measured_shape": {
            name: getattr(shape, name) for name in ("batch", "tokens", "paragraphs", "target_tokens", "beams", "hops")
        },
        "warmup_step_times_s": warmup_times,
        "step_times_s": times,
        "timed_steps": len(times),
        "stopped": stopped,
    }
    if losses and not all(torch.isfinite(loss).item() for loss in losses):
        record["stopped"] = "non-finite training loss"
    if device.type == "cuda":
        record["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    else:
        record["peak_memory_gib"] = None
        record["process_max_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    if times:
        step_s = statistics.median(times)
        tokens = counted["tokens"] if built.kind == BEAM_RETRIEVER else shape.tokens_per_step
        flops = model_flops(built, shape, component.mode, tokens)
        record.update(
            step_s=step_s,
            examples_per_s=shape.batch / step_s,
            tokens_per_step=tokens,
            tokens_per_s=tokens / step_s,
            model_flops_per_step=flops,
            mfu=None if args.peak_flops is None else flops / step_s / args.peak_flops,
        )
    return record


def free_memory(device: torch.device, collect: bool = False) -> None:
    """Give the device's cached blocks back (`collect`: after a full garbage collection, to free what cycles hold)."""
    if collect:
        gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---- results --------------------------------------------------------------------------------------------------


def _format(value: Any, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def progress(record: dict[str, Any]) -> str:
    """One component's result in a few words (the script's progress lines)."""
    if record.get("step_s") is None:
        return f"stopped: {record.get('stopped')}"
    return (
        f"step {record['step_s']:.4f} s, {record['tokens_per_s']:,.0f} tokens/s, "
        f"peak memory {_format(record.get('peak_memory_gib'), '.2f')} GiB, MFU {_format(record.get('mfu'), '.1%')}"
        + (f" ({record['stopped']})" if record.get("stopped") else "")
    )


def component_rows(results: dict[str, Any], usage: dict[str, int]) -> list[list[str]]:
    """One markdown row per component of the plan (measured or not)."""
    rows = []
    for key, steps in usage.items():
        record = results["components"].get(key, {})
        hours = record["step_s"] * steps / 3600 if record.get("step_s") else None
        rows.append(
            [
                f"`{key}`",
                str(record.get("timed_steps", 0)),
                _format(record.get("step_s"), ".4f"),
                _format(record.get("examples_per_s"), ",.1f"),
                _format(record.get("tokens_per_s"), ",.0f"),
                _format(record.get("peak_memory_gib"), ".2f"),
                _format(record.get("mfu"), ".1%"),
                f"{steps:,}",
                _format(hours, ",.2f"),
                record.get("stopped") or ("" if record else "not measured"),
            ]
        )
    return rows


def markdown(results: dict[str, Any], usage: dict[str, int], projection: Projection, overrides: list[str]) -> str:
    """The results as markdown: the settings, the components' table, the projection's table."""
    kind = "tiny shapes (--tiny): a smoke test, not the real models" if results["tiny"] else "the real shapes"
    lines = [
        f"# GPU check: {results['device']}",
        "",
        f"{len(results['components'])} of {len(usage)} components measured at {kind}; {results['autocast']} autocast; "
        f"{results['warmup_steps']} warm-up + up to {results['steps']} timed steps each; wall {results['wall_s']:.0f} s "
        f"of a {results['budget_s']:.0f} s budget; torch {results['torch']}, transformers {results['transformers']}; "
        f"peak bf16 FLOP/s: {_format(results['peak_bf16_flops'], '.3g')} ({results['peak_source']}); "
        f"peak memory: {results['memory_measure']}.",
        "",
        table(
            (
                "component",
                "timed",
                "step s",
                "examples/s",
                "tokens/s",
                "peak GiB",
                "MFU",
                "grid steps",
                "grid GPU-hours",
                "note",
            ),
            component_rows(results, usage),
            markdown=True,
        ),
        "",
        f"## Projection: {' '.join(overrides)}"
        + (" (from tiny-shape step times: no projection of the real run)" if results["tiny"] else ""),
        "",
        table(JOB_HEADERS, job_rows(projection), markdown=True),
    ]
    missing = missing_lines(projection, overrides)
    if missing:
        lines += ["", "```", *missing, "```"]
    return "\n".join(lines) + "\n"


def write_results(
    results: dict[str, Any], usage: dict[str, int], jobs: list, overrides: list[str], paths: dict[str, Path | None]
) -> str:
    """Rewrite the JSON and markdown results (atomically), with the projection of what is measured so far; returns
    the markdown."""
    results["wall_s"] = _elapsed()
    projection = project(jobs, parse_throughput(results, "this run"))
    results["projection"] = projection.as_dict(stages=False)
    text = markdown(results, usage, projection, overrides)
    if paths["json"] is not None:
        write_json(paths["json"], results)
    if paths["markdown"] is not None:
        with atomic_open(paths["markdown"]) as handle:
            handle.write(text)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the plan (default: experiment=paper_grid)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes: a smoke test (CPU)")
    parser.add_argument("--only", nargs="+", metavar="KEY", help="measure only these components (keys of the plan)")
    parser.add_argument("--warmup", type=int, help="untimed steps per component (default 2; 1 with --tiny)")
    parser.add_argument("--steps", type=int, help="timed steps per component (default 5; 2 with --tiny)")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="autocast dtype (fp32: none)")
    parser.add_argument("--budget-s", type=float, default=450.0, help="stop measuring before this many seconds")
    parser.add_argument("--reserve-s", type=float, default=10.0, help="seconds kept back for writing the results")
    parser.add_argument("--peak-tflops", type=float, help="the device's peak dense bf16 TFLOP/s (for MFU)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (CPU runs only)")
    parser.add_argument("--json", type=Path, help="JSON results (when not given: $OUT/gpu_check.json if OUT is set)")
    parser.add_argument(
        "--markdown", type=Path, help="markdown results (when not given: $OUT/gpu_check.md if OUT is set)"
    )
    args = parser.parse_intermixed_args(argv)
    tiny = args.tiny
    args.warmup = args.warmup if args.warmup is not None else (1 if tiny else 2)
    args.steps = args.steps if args.steps is not None else (2 if tiny else 5)
    overrides = args.overrides or ["experiment=paper_grid"]
    out = os.environ.get("OUT")
    paths = {  # an explicit path wins over OUT
        "json": args.json or (Path(out) / "gpu_check.json" if out else None),
        "markdown": args.markdown or (Path(out) / "gpu_check.md" if out else None),
    }
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device here (torch.cuda.is_available() is False)")
    device = args.device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    args.peak_flops, peak_source = peak_flops(device, args.peak_tflops)

    jobs = plan_experiment(overrides)
    usage: dict[str, int] = {}
    for job in jobs:
        for stage in job.stages:
            usage[stage.component.key] = usage.get(stage.component.key, 0) + stage.steps
    planned = components(jobs)
    gc.freeze()  # the configs and modules loaded so far stay: collections scan only what the measurements make
    if args.only:
        unknown = sorted(set(args.only) - set(planned))
        if unknown:
            parser.error(f"--only: not components of the plan of {' '.join(overrides)}: {', '.join(unknown)}")
        planned = {key: planned[key] for key in args.only}
    # most compute first (the time guard drops the least), one module per (backbone, kind) built once
    groups: dict[tuple[str, str], list[Component]] = {}
    for key in sorted(planned, key=lambda key: -grid_compute(planned[key], usage[key])):
        component = planned[key]
        groups.setdefault((component.backbone, component.kind), []).append(component)

    results: dict[str, Any] = {
        "format": "musique-models gpu_check",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "device_type": device.type,
        "tiny": tiny,
        "autocast": args.dtype,
        "optimizer": "AdamW",
        "peak_bf16_flops": args.peak_flops,
        "peak_source": peak_source,
        "memory_measure": "torch.cuda.max_memory_allocated per component"
        if device.type == "cuda"
        else "none on CPU (process_max_rss_gib: the process's peak RSS so far)",
        "flops_formula": "training 6 x N x tokens, prediction 2 x N x tokens; N: non-embedding parameters "
        "(seq2seq: encoder on source tokens, decoder + output layer on target tokens x beams); no attention term",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "overrides": overrides,
        "warmup_steps": args.warmup,
        "steps": args.steps,
        "budget_s": args.budget_s,
        "setup_s": _elapsed(),
        "published_configs": {name: published.source for name, published in PUBLISHED.items()},
        # the plan measured: its jobs, and each component's steps over all of them
        "plan": {"jobs": [job.name for job in jobs], "grid_steps": usage, "measured": list(planned)},
        "components": {},
    }
    print(
        f"{len(planned)} components of {len(jobs)} jobs ({' '.join(overrides)}); "
        f"setup {_elapsed():.1f} s; {results['device']}",
        flush=True,
    )
    for (backbone, kind), members in groups.items():
        if _elapsed() + args.reserve_s > args.budget_s:
            for component in members:
                results["components"][component.key] = {**component.as_dict(), "stopped": "time guard before start"}
            continue
        built = None
        try:
            built = build(backbone, kind, tiny, device)
        except Exception as error:  # record and go on: one bad component must not cost the rest of the GPU time
            traceback.print_exc()
            for component in members:
                results["components"][component.key] = {
                    **component.as_dict(),
                    "stopped": f"build failed: {type(error).__name__}: {str(error)[:200]}",
                }
        for component in members if built is not None else []:
            shape = measured_shape(component, tiny)
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
            record = None
            try:
                record = measure(built, component, shape, args)
            except OUT_OF_MEMORY as error:
                stopped = f"out of memory at batch {shape.batch}: {str(error)[:200]}"
            except Exception as error:  # as above: recorded, the next component runs
                traceback.print_exc()
                stopped = f"error: {type(error).__name__}: {str(error)[:200]}"
            if record is None:
                built.module.zero_grad(set_to_none=True)
                record = {**component.as_dict(), "stopped": stopped}
            free_memory(device, collect=record.get("step_s") is None)
            results["components"][component.key] = record
            write_results(results, usage, jobs, overrides, paths)
            print(f"{_elapsed():6.1f} s  {component.key}: {progress(record)}", flush=True)
        del built
        free_memory(device, collect=True)
    text = write_results(results, usage, jobs, overrides, paths)
    print()
    print(text)
    written = [str(path) for path in paths.values() if path is not None]
    print(f"wall {results['wall_s']:.1f} s; results in {', '.join(written) or '(no file: give --json/--markdown)'}")


if __name__ == "__main__":
    main()
