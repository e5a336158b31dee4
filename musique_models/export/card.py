"""The model card of an export (`README.md`), in the Hugging Face Hub's format: YAML front matter (library,
licence, tags, datasets, base models, the evaluation results as a `model-index`), then what the model is for, what
it was trained on and with, its scores (with 95% intervals where the run has them), where it differs from the paper
and how to load it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from musique_models.run_files import CONFIG_FILE, METRICS_FILE, PROVENANCE_FILE
from musique_models.systems import system_name

# The Hub's dataset ids of the paper's datasets.
HUB_DATASETS = {
    "musique_ans": "bdsaglam/musique",
    "musique_full": "bdsaglam/musique",
    "hotpotqa_20k": "hotpotqa/hotpot_qa",
    "2wiki_20k": "xanhho/2WikiMultihopQA",
}
CARD_METRICS = {  # metric key -> (Hub metric type, readable name)
    "answer_f1": ("f1", "Answer F1 (An)"),
    "answer_em": ("exact_match", "Answer EM"),
    "support_f1": ("f1", "Support F1 (Sp)"),
    "group_answer_sufficiency_f1": ("f1", "An+Sf F1"),
    "group_support_sufficiency_f1": ("f1", "Sp+Sf F1"),
    "sufficiency_accuracy": ("accuracy", "Answerability accuracy (Sf)"),
}


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def _base_models(config: dict[str, Any]) -> list[str]:
    """The pretrained models the run started from (hub ids; a packaged encoder's name)."""
    found = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if str(node.get("_target_", "")).endswith("BackboneSpec"):  # not its tokenizer's or converter's spec
                name = node.get("path") if node.get("source") == "hub" else node.get("distribution")
                if node.get("source") in ("hub", "package") and name and name not in found:
                    found.append(str(name))
                return
            for value in node.values():
                walk(value)

    walk(config.get("model") or {})
    return found


# the stock `transformers` class that loads a stage's saved network, by its kind (`runs.exported`)
STOCK_CLASSES = {"encoder": "AutoModel", "seq2seq_lm": "AutoModelForSeq2SeqLM", "causal_lm": "AutoModelForCausalLM"}


def model_card(run_dir: Path, stages: dict[str, Any]) -> str:
    """The card's markdown for the run in `run_dir` whose stages `stages` were exported."""
    config = yaml.safe_load((run_dir / CONFIG_FILE).read_text()) or {}
    metrics = _json(run_dir / METRICS_FILE)
    intervals = _json(run_dir / "metrics.intervals.json").get("intervals", {})
    provenance = _json(run_dir / PROVENANCE_FILE)
    dataset = config.get("dataset") or {}
    dataset_name = str(dataset.get("name", ""))
    display = str(dataset.get("display_name") or dataset_name)
    split = str(config.get("eval_split", "dev"))
    system = system_name(config) or str(config.get("model_name") or "")
    sample = bool(dataset.get("sample"))
    results = [
        {"type": kind, "value": round(100 * float(metrics[key]), 2), "name": name}
        for key, (kind, name) in CARD_METRICS.items()
        if key in metrics
    ]
    front = {
        "library_name": "musique-models",
        "license": "apache-2.0",
        "tags": ["question-answering", "multihop-question-answering", "musique"],
        "datasets": [HUB_DATASETS[dataset_name]] if dataset_name in HUB_DATASETS else [],
        "base_model": _base_models(config) or None,
        "model-index": [
            {
                "name": f"{system} ({config.get('model_name')}) on {display}",
                "results": [
                    {
                        "task": {"type": "question-answering", "name": "Multihop question answering"},
                        "dataset": {
                            "name": display,
                            "type": HUB_DATASETS.get(dataset_name, dataset_name),
                            "split": split,
                        },
                        "metrics": results,
                    }
                ],
            }
        ],
    }
    front = {key: value for key, value in front.items() if value not in (None, [])}
    rows = []
    for key, (_, name) in CARD_METRICS.items():
        if key not in metrics:
            continue
        interval = intervals.get(key)
        text = f"{100 * float(metrics[key]):.1f}"
        if interval:
            text += f" [{100 * interval['low']:.1f}, {100 * interval['high']:.1f}]"
        rows.append(f"| {name} | {text} |")
    count = metrics.get("count")
    trained_on = "the shipped sample" if sample else "its official files"
    untrained = bool(stages) and all(entry.get("untrained") for entry in stages.values())
    model_settings = config.get("model") or {}
    if untrained:  # a prompted model: nothing was trained, its exemplars come from the training split
        data_line = (
            f"- dataset: {display} ({trained_on}); nothing trained: the model is prompted, with "
            f"{model_settings.get('shots', 0)} exemplars drawn from the training split with seed {config.get('seed')};"
        )
    else:
        data_line = (
            f"- dataset: {display} ({trained_on}), training questions capped at {dataset.get('train_size')}, seed "
            f"{config.get('seed')};"
        )
    one_step = bool((config.get("trainer") or {}).get("fast_dev_run"))
    whole = sorted(stage for stage, entry in stages.items() if entry.get("whole"))
    lines = [
        "---",
        yaml.safe_dump(front, sort_keys=False, allow_unicode=True).strip(),
        "---",
        "",
        f"# {system} on {display}",
        "",
        f"A multihop question-answering model trained with musique-models as `model={config.get('model_name')}` "
        f"({system}; the MuSiQue paper: Trivedi et al., TACL 2022).",
        "",
        "## Intended use",
        "",
        "Answering a question over a handful of paragraphs (its supporting paragraphs among distractors), naming the "
        "paragraphs that support the answer and, for a model trained on MuSiQue-Full, whether the paragraphs answer "
        "it at all. A research model: its scores below are on the data it was evaluated on, nothing more.",
        "",
        "## Training data and settings",
        "",
        data_line,
        f"- stages exported: {', '.join(sorted(stages)) or 'none (the model trains nothing)'};",
        f"- musique-models {(provenance.get('versions') or {}).get('musique-models', '?')}, code "
        f"{(provenance.get('code') or {}).get('commit', '?')}; every setting is in `config.yaml`.",
        "",
        "## Evaluation",
        "",
        f"On the {split} split of {display}"
        + (f" ({int(count)} questions)" if count else "")
        + ": the official MuSiQue evaluator's metrics, x 100, with 95% bootstrap intervals where the run has them.",
        "",
        "| metric | value |",
        "|---|---|",
        *rows,
        "",
    ]
    if one_step:
        lines += [
            "Trained with `trainer.fast_dev_run` (one batch per stage): a check that the pipeline runs, not a model.",
            "",
        ]
    if sample:
        lines += [
            "These figures come from the shipped sample (a few hundred questions at most): a pipeline check, not a "
            "result to compare with the paper's.",
            "",
        ]
    lines += [
        "## Differences from the paper",
        "",
        "musique-models follows the official code (StonyBrookNLP/musique) and lists where it differs, and why, in "
        "its documentation (`docs/models.md`, *Where this framework differs from the official code*).",
        "",
        "## How to load it",
        "",
        "```python",
        "from musique_models.runs import load_run",
        "",
        'model = load_run("path/to/this/folder")',
        'answer = model.predict("Who founded the city ...?", [{"title": "...", "text": "..."}])',
        "print(answer.answer, answer.support_titles)",
        "```",
        "",
    ]
    networks = {stage: entry["backbone"] for stage, entry in sorted(stages.items()) if entry.get("backbone")}
    if networks:
        lines += [
            f"Each stage's pretrained network, {'as used' if untrained else 'as trained'}, is a stock `transformers` "
            "model (its task heads, in `<stage>/model.safetensors`, are musique-models'; the tokenizer is the "
            "backbone's own, without the markers the module adds; an encoder's pooler, which no module uses, is not "
            "saved):",
            "",
            "```python",
            f"from transformers import {', '.join(sorted({STOCK_CLASSES[n['kind']] for n in networks.values()}))}",
            "",
            *(f"{stage} = {stock_loading(network)}" for stage, network in networks.items()),
            "```",
            "",
        ]
    if whole:
        lines += [
            f"Exported whole (every weight in `model.safetensors`): {', '.join(whole)}. Loading reads the base model "
            "its backbone names from its package or the Hugging Face Hub.",
            "",
        ]
    lines += _selector_with_stock_transformers(config, stages)
    return "\n".join(lines)


SCORE_HEAD = ["score_head.bias", "score_head.weight"]  # `ParagraphSelector`'s one head


def stock_loading(network: dict[str, Any], path: str | None = None) -> str:
    """The stock `transformers` call that loads a saved network (`path`: the Python expression of its folder)."""
    path = path or f'"path/to/this/folder/{network["folder"]}"'
    pooler = ", add_pooling_layer=False" if network.get("without_pooler") else ""  # no pooler saved: none built
    return f"{STOCK_CLASSES[network['kind']]}.from_pretrained({path}{pooler})"


def _selector_with_stock_transformers(config: dict[str, Any], stages: dict[str, Any]) -> list[str]:
    """For a Select+Answer selector: its relevance score with stock `transformers` and a few lines of torch (its
    head is a linear layer over the pooled token states, which no stock classifier has)."""
    entry = stages.get("selector") or {}
    settings = (config.get("model") or {}).get("selector") or {}
    backbone = settings.get("backbone") or {}
    if entry.get("heads") != SCORE_HEAD or entry["backbone"]["kind"] != "encoder" or "max_length" not in settings:
        return []
    pooling = str(backbone.get("pooling", "cls"))
    pooled = "hidden.mean(0)  # mean pooling" if pooling == "mean" else "hidden[0]  # the first token's state"
    # the selector reads at most `max_length` tokens of `question SEP paragraph`, special tokens on top, within the
    # backbone's positions
    limit = f"min({int(settings['max_length'])} + tokenizer.num_special_tokens_to_add(), {int(backbone.get('max_length', 512))})"
    return [
        "The selector is not a stock sequence classifier (its head is a linear layer over the "
        f"{'mean of the' if pooling == 'mean' else 'first'} token states, not BERT's pooler); its relevance score with "
        "stock `transformers`:",
        "",
        "```python",
        "import torch",
        "from safetensors.torch import load_file",
        "from transformers import AutoModel, AutoTokenizer",
        "",
        'folder = "path/to/this/folder/selector"',
        "encoder = " + stock_loading(entry["backbone"], 'f"{folder}/backbone"') + ".eval()",
        'tokenizer = AutoTokenizer.from_pretrained(f"{folder}/backbone")',
        'head = load_file(f"{folder}/model.safetensors")  # score_head.weight, score_head.bias',
        "",
        "",
        "def relevance(question: str, paragraph: str) -> float:",
        '    """How likely `paragraph` supports the answer to `question` (a logit: higher is likelier)."""',
        '    text = " ".join(question.split()) + " SEP " + paragraph.strip()',
        f'    tokens = tokenizer(text, truncation=True, max_length={limit}, return_tensors="pt")',
        "    with torch.no_grad():",
        "        hidden = encoder(**tokens).last_hidden_state[0]  # (tokens, hidden)",
        f"    pooled = {pooled}",
        '    return float(pooled @ head["score_head.weight"][0] + head["score_head.bias"][0])',
        "```",
        "",
    ]
