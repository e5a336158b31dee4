"""Generation speed of the generative reader, side by side in one run, on the same model and the same questions:

(a) the reader's batched prediction (`GenerativeReaderPredictor.read`: featurise, length-sorted batches, left padding
    for a decoder-only model, greedy `generate` with the KV cache and the per-step scores for the confidence,
    decode, parse);
(b) bare `model.generate` calls over the very batches (a) collated (recorded while (a) ran), greedy, same token cap;
(c) the reader generating one question at a time (`eval_batch_size` 1: the same path as (a)).

Targets: (a) <= 1.15 x (b) (everything around `generate` costs at most 15%) and (c) >= 3 x (a).

The model is the offline MiniLM BERT2BERT (`minilm_bert2bert`, the seq2seq answerer of `model=select_generate`)
trained in process for `--steps` optimizer steps on 8 training questions of the shipped MuSiQue-Ans sample, so that
it writes targets of its own length; `--backbone tiny_llama` measures the decoder-only path instead, and
`--backbone smollm2_135m_instruct --steps 0` the real SmolLM2-135M-Instruct as shipped (`--paragraphs 20
--paragraph-tokens 150`: MuSiQue-length prompts). (b') times the prompts alone over the same batches (one token
generated): the part of (b) that batching cannot shorten on a CPU, where reading a prompt is compute-bound. Each question
reads its first `--paragraphs` paragraphs (as a selector's top K would give), at the answerer's token caps. 2 CPU
threads.

    python benchmarks/bench_generate.py [--questions 96] [--batch-size 16] [--backbone minilm_bert2bert] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.utils import instantiate  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from musique_models import PROJECT_ROOT  # noqa: E402
from musique_models.features.generative import featurize_generative  # noqa: E402
from musique_models.models.backbone import load_tokenizer  # noqa: E402
from musique_models.models.generative_reader import GenerativeReader  # noqa: E402
from musique_models.recipes.generative import FittedGenerativeReader  # noqa: E402
from musique_models.training.datamodule import featurize  # noqa: E402
from musique_models.training.loaders import PaddingCollator  # noqa: E402

BATCHED_OVER_BARE_MAX = 1.15
ONE_AT_A_TIME_OVER_BATCHED_MIN = 3.0


def settings_for(backbone, paragraph_tokens: int) -> dict:
    return {
        "causal": backbone.causal,
        "max_question_tokens": 100,
        "max_paragraph_tokens": paragraph_tokens,
        "max_source_tokens": min(2048, backbone.max_length),
        "max_target_tokens": 64,
        "include_title": False,
        "with_answerability": False,
        "exemplars": [],
    }


def trained_reader(backbone, tokenizer, train_rows, settings: dict, steps: int) -> GenerativeReader:
    """The reader after `steps` AdamW steps (batch 2) on the featurised training rows."""
    torch.manual_seed(0)
    reader = GenerativeReader(backbone, len(tokenizer), tokenizer.pad_token_id, max_target_tokens=64)
    features = featurize(train_rows, featurize_generative, tokenizer, None, "bench-train", **settings)
    rows = [features[row] for row in range(len(features))]
    collate = PaddingCollator(tokenizer.pad_token_id)
    optimizer = torch.optim.AdamW(reader.parameters(), lr=backbone.learning_rate)
    for step in range(steps):
        batch = collate([rows[(2 * step) % len(rows)], rows[(2 * step + 1) % len(rows)]])
        loss = reader.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return reader.eval()


def bare_generate_seconds(reader: GenerativeReader, batches: list[dict], max_new_tokens: int) -> float:
    """Seconds of greedy `model.generate` over `batches` (collated as the reader collated them), nothing around it."""
    start = time.perf_counter()
    with torch.inference_mode():
        for batch in batches:
            input_ids, attention_mask = reader.generation_inputs(batch)
            reader.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                num_beams=1,
            )
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--paragraphs", type=int, default=5)
    parser.add_argument("--paragraph-tokens", type=int, default=90)
    parser.add_argument("--backbone", default="minilm_bert2bert")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(2)

    overrides = ["model=select_generate", f"backbone@model.answerer.backbone={args.backbone}"]
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[*overrides, "dataset=musique_ans", "dataset.sample=true", "trainer=cpu"])
    source = instantiate(cfg.dataset)
    backbone = instantiate(cfg.model.answerer.backbone)
    tokenizer = load_tokenizer(backbone, paragraph_marker=False)
    settings = settings_for(backbone, args.paragraph_tokens)

    def first_paragraphs(table):
        return table.add_column(
            "selected_idxs", [[p["idx"] for p in ps[: args.paragraphs]] for ps in table["paragraphs"]]
        )

    train_rows = first_paragraphs(source.load("train").select(range(8)))
    start = time.perf_counter()
    reader = trained_reader(backbone, tokenizer, train_rows, settings, args.steps)
    train_s = time.perf_counter() - start
    fitted = FittedGenerativeReader(reader, tokenizer, settings)
    questions = first_paragraphs(source.load("dev").select(range(args.questions)))

    # (a) the reader's batched prediction, its batches recorded
    batched = fitted.predictor(cfg, args.batch_size)
    batched.batches.recorded = []
    batched.read(questions.select(range(min(8, len(questions)))))  # warm-up
    batched.batches.recorded = []
    start = time.perf_counter()
    decoded = batched.read(questions)
    batched_s = time.perf_counter() - start
    (batches,) = batched.batches.recorded

    # (b) bare generate over the very same batches
    bare_s = bare_generate_seconds(reader, batches, max_new_tokens=64)
    # (b') the prompts alone over the same batches (one token generated): the share of (b) that batching cannot cut,
    # as reading a prompt is compute-bound at any batch size
    prompts_s = bare_generate_seconds(reader, batches, max_new_tokens=1)

    # (c) one question at a time, the same path
    single = fitted.predictor(cfg, 1)
    start = time.perf_counter()
    single_decoded = single.read(questions)
    single_s = time.perf_counter() - start

    same = [q.answer for q in decoded] == [q.answer for q in single_decoded]
    # the raw generations too: parsed answers can agree by being empty on both sides
    same_text = [g.text for g in batched.generations] == [g.text for g in single.generations]
    generated = [len(tokenizer(g.text, add_special_tokens=False)["input_ids"]) for g in batched.generations]
    result = {
        "backbone": backbone.name,
        "questions": len(questions),
        "batch_size": args.batch_size,
        "batches": len(batches),
        "mean_input_tokens": round(sum(int(b["attention_mask"].sum()) for b in batches) / len(questions), 1),
        "mean_generated_tokens": round(sum(generated) / len(generated), 1),
        "train_steps": args.steps,
        "train_s": round(train_s, 1),
        "batched_s": round(batched_s, 2),
        "bare_generate_s": round(bare_s, 2),
        "prompts_alone_s": round(prompts_s, 2),
        "one_at_a_time_s": round(single_s, 2),
        "batched_over_bare": round(batched_s / bare_s, 3),
        "one_at_a_time_over_batched": round(single_s / batched_s, 2),
        "same_answers_batched_and_one_at_a_time": same,
        "same_generations_batched_and_one_at_a_time": same_text,
        "unparsed_generations": sum(bool(g.problems) for g in batched.generations),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
    }
    result["verdict"] = (
        "PASS"
        if result["batched_over_bare"] <= BATCHED_OVER_BARE_MAX
        and result["one_at_a_time_over_batched"] >= ONE_AT_A_TIME_OVER_BATCHED_MIN
        else "FAIL"
    )
    table = Table(title=f"Generation on {len(questions)} MuSiQue-Ans dev questions ({backbone.name}, 2 threads)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, str(value))
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
