"""A finished run as one folder to hand on or publish: `python -m musique_models.export RUN_DIR --out DIR`.

    DIR/README.md               a model card in the Hugging Face Hub's format (YAML front matter, then prose)
    DIR/config.yaml             the run's composed config; provenance.json, metrics.json (and its intervals)
    DIR/export.json             what the folder holds: each stage and its files, the version that wrote it
    DIR/<stage>/model.safetensors   the stage's best weights (the LightningModule's state dict, safetensors)
    DIR/<stage>/musique_models_module.json   what rebuilds the module around them (its hyperparameters)
    DIR/<stage>/tokenizer.json ...           the stage's tokenizer, saved with `save_pretrained` (where the module's
                                             vocabulary is the tokenizer's: not the decomposer's, which adds tokens)
    DIR/<stage>/encoder/                     an encoder stage's encoder alone (config.json, model.safetensors,
                                             tokenizer): `transformers.AutoModel.from_pretrained(DIR/<stage>/encoder)`

`musique_models.runs.load_run(DIR)` loads an export as it loads a run folder, with identical predictions. The
module is rebuilt from its backbone's configuration (`BackboneSpec`: a packaged or hub encoder is read from the
package or the hub cache once, then every weight comes from `model.safetensors`), so the machine that loads it needs
that package or hub model too; a run that reused another run's trained stage (`selector_checkpoint`,
`decomposer_checkpoint`) still reads it from where its config says. Nothing is pickled, and reading an export
rebuilds no class but `BackboneSpec`.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

from musique_models import __version__
from musique_models.errors import MusiqueModelsError
from musique_models.export.card import model_card
from musique_models.io import write_json
from musique_models.run_files import (
    CONFIG_FILE,
    EXEMPLARS_FILE,
    EXPORT_FILE,
    METRICS_FILE,
    PROVENANCE_FILE,
    STAGE_FILE,
    STATUS_FILE,
    check_run_folder,
)

WEIGHTS_FILE = "model.safetensors"
MODULE_FILE = "musique_models_module.json"
ENCODER_FOLDER = "encoder"  # a stage's encoder alone, in the Hugging Face layout
INTERVALS_FILE = "metrics.intervals.json"


class ExportError(MusiqueModelsError):
    """A run that cannot be exported (not finished, an output folder that is not empty)."""


def encode_hyperparameters(value: Any) -> Any:
    """A module's hyperparameters as JSON: a dataclass (`BackboneSpec`) as `{"__dataclass__": path, "fields": ...}`,
    recursively; everything else as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        path = f"{type(value).__module__}.{type(value).__qualname__}"
        fields = {item.name: encode_hyperparameters(getattr(value, item.name)) for item in dataclasses.fields(value)}
        return {"__dataclass__": path, "fields": fields}
    if isinstance(value, dict):
        return {str(key): encode_hyperparameters(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [encode_hyperparameters(item) for item in value]
    return value


def push_to_hub(folder: str | Path, repo_id: str, private: bool = False) -> str:
    """Upload an export to the Hugging Face Hub as model repository `repo_id` (made if missing), with
    `huggingface_hub` (its token: `huggingface-cli login` or `HF_TOKEN`); the repository's URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    url = api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    api.upload_folder(
        folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message="musique-models export"
    )
    return str(url)


def export_run(run_dir: str | Path, out: str | Path) -> Path:
    """Write the export of the finished run in `run_dir` into `out` (created; refused when it holds anything):
    every trained stage's weights, hyperparameters and tokenizer, the run's config, provenance and metrics, and its
    model card. Written into a temporary folder beside `out`, renamed when complete (removed on a failure)."""
    run_dir = check_run_folder(run_dir)
    if (run_dir / EXPORT_FILE).exists():
        raise ExportError(f"{run_dir} is an export already: copy the folder instead")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"--out {out}: the folder is not empty; give a new one")
    partial = out.parent / f".{out.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        _write_export(run_dir, partial)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # nothing half-written stays
        raise
    if out.exists():
        out.rmdir()
    partial.rename(out)
    return out


def _save_stock_encoder(backbone: Any, vocab_size: int, weights: dict[str, Any], folder: Path) -> bool:
    """Save a stage's encoder (its `encoder.*` weights: a stock `transformers` encoder, as `load_encoder` builds
    it) in the Hugging Face layout, loadable with `AutoModel.from_pretrained(folder)`; whether the stage has one (a
    seq2seq or decoder-only stage has not)."""
    from musique_models.models.backbone import load_encoder

    prefix = "encoder."
    encoder_weights = {key[len(prefix) :]: tensor for key, tensor in weights.items() if key.startswith(prefix)}
    if not encoder_weights or getattr(backbone, "causal", False):
        return False
    encoder = load_encoder(backbone, vocab_size)
    missing, unexpected = encoder.load_state_dict(encoder_weights, strict=False)
    if unexpected or [key for key in missing if not key.startswith("pooler.")]:
        return False  # not the stock encoder's layout
    encoder.save_pretrained(folder)
    return True


def _write_export(run_dir: Path, partial: Path) -> None:
    import torch
    from safetensors.torch import save_file

    from musique_models.models.backbone import load_tokenizer

    stages = {}
    for marker in sorted(run_dir.glob(f"*/{STAGE_FILE}")):
        stage = marker.parent.name
        checkpoint = torch.load(
            run_dir / json.loads(marker.read_text())["best_checkpoint"], map_location="cpu", weights_only=False
        )
        folder = partial / stage
        folder.mkdir()
        weights = {key: tensor.contiguous().clone() for key, tensor in checkpoint["state_dict"].items()}
        save_file(weights, folder / WEIGHTS_FILE, metadata={"format": "pt"})
        hyperparameters = checkpoint.get("hyper_parameters") or {}
        write_json(folder / MODULE_FILE, {"hyper_parameters": encode_hyperparameters(dict(hyperparameters))})
        backbone = hyperparameters.get("backbone")
        if backbone is not None:  # the stage's tokenizer, where the module's vocabulary is exactly its own
            tokenizer = load_tokenizer(backbone, paragraph_marker=not getattr(backbone, "causal", False))
            if len(tokenizer) == hyperparameters.get("vocab_size"):  # (the decomposer adds step tokens of its own)
                tokenizer.save_pretrained(folder)
                if _save_stock_encoder(backbone, hyperparameters["vocab_size"], weights, folder / ENCODER_FOLDER):
                    tokenizer.save_pretrained(folder / ENCODER_FOLDER)
                    stages.setdefault(stage, {})["encoder"] = f"{stage}/{ENCODER_FOLDER}"
        stages[stage] = {
            **stages.get(stage, {}),
            "weights": f"{stage}/{WEIGHTS_FILE}",
            "module": f"{stage}/{MODULE_FILE}",
        }
    # the run's files, and what a recipe's `load` reads beside the checkpoints (a prompted LLM's exemplars)
    for name in (CONFIG_FILE, PROVENANCE_FILE, METRICS_FILE, INTERVALS_FILE, EXEMPLARS_FILE):
        if (run_dir / name).exists():
            shutil.copy2(run_dir / name, partial / name)
    write_json(partial / STATUS_FILE, {"status": "finished"})
    write_json(partial / EXPORT_FILE, {"musique_models": __version__, "source": run_dir.name, "stages": stages})
    (partial / "README.md").write_text(model_card(run_dir, stages), encoding="utf-8")
