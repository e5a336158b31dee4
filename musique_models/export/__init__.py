"""A finished run as one folder to hand on or publish: `python -m musique_models.export RUN_DIR --out DIR`.

    DIR/README.md               a model card in the Hugging Face Hub's format (YAML front matter, then prose)
    DIR/config.yaml             the run's composed config; provenance.json, metrics.json (and its intervals)
    DIR/export.json             what the folder holds: each stage and its files, the version that wrote it
    DIR/<stage>/backbone/       the stage's pretrained network as trained, in the Hugging Face layout (config.json,
                                model.safetensors, tokenizer): stock `transformers` loads it
    DIR/<stage>/model.safetensors   the module's other weights (its heads)
    DIR/<stage>/musique_models_module.json   what rebuilds the module around them (its hyperparameters)

A stage the run reused from another run (`model.selector_checkpoint=PATH`) is exported too, as `reused_<name>`, and
so is what a recipe builds from its config rather than reads from a stage (`untrained_modules`: a prompted LLM). The
format, both ways, is `musique_models.runs.exported`'s. `musique_models.runs.load_run(DIR)` loads an export as it
loads a run folder, with identical predictions, reading nothing outside it (no package, no hub). Nothing is pickled,
and reading an export rebuilds no class but `BackboneSpec`.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

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
from musique_models.runs.exported import file_checksums, reused_checkpoints, write_stage

INTERVALS_FILE = "metrics.intervals.json"
log = logging.getLogger(__name__)


class ExportError(MusiqueModelsError):
    """A run that cannot be exported (not finished, an output folder that is not empty, a reused stage that is gone)."""


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
    try:
        run_dir = check_run_folder(run_dir)
    except MusiqueModelsError as error:
        raise ExportError(str(error).removeprefix("run=")) from None
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


def _write_export(run_dir: Path, partial: Path) -> None:
    import torch

    from musique_models.recipes.build import instantiate_recipe

    def read(path: Path) -> dict[str, Any]:
        return torch.load(path, map_location="cpu", weights_only=False)

    cfg = OmegaConf.load(run_dir / CONFIG_FILE)
    stages = {}
    for marker in sorted(run_dir.glob(f"*/{STAGE_FILE}")):
        stage = marker.parent.name
        stages[stage] = write_stage(read(run_dir / json.loads(marker.read_text())["best_checkpoint"]), partial / stage)
    reused = {}
    for key, checkpoint in reused_checkpoints(cfg).items():
        if not Path(checkpoint).expanduser().is_file():
            raise ExportError(f"{key}={checkpoint}: the reused stage's checkpoint is gone; the export needs it")
        stage = "reused_" + key.removeprefix("model.").removesuffix("_checkpoint").replace(".", "_")
        stages[stage] = write_stage(read(Path(checkpoint).expanduser()), partial / stage)
        reused[key] = stage
    # what the recipe builds from its config rather than reads from a stage (a prompted LLM), saved as a stage
    recipe_cfg = cfg.copy()
    if recipe_cfg.get("model") and "engine" in recipe_cfg.model:
        recipe_cfg.model.engine = "hf"  # an export generates nothing: vLLM, where the run used it, is not needed
    untrained = getattr(instantiate_recipe(recipe_cfg), "untrained_modules", None) if cfg.get("model") else None
    for stage, module in (untrained(cfg, run_dir) if untrained else {}).items():
        checkpoint = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}
        stages[stage] = {**write_stage(checkpoint, partial / stage), "untrained": True}
    # the run's files, and what a recipe's `load` reads beside the checkpoints (a prompted LLM's exemplars)
    for name in (CONFIG_FILE, PROVENANCE_FILE, METRICS_FILE, INTERVALS_FILE, EXEMPLARS_FILE):
        if (run_dir / name).exists():
            shutil.copy2(run_dir / name, partial / name)
    write_json(partial / STATUS_FILE, {"status": "finished"})
    for stage, entry in stages.items():
        if entry.get("whole"):
            log.warning(
                "stage %s is exported whole: its network does not round-trip through save_pretrained (a LoRA "
                "adapter, or a module that keeps it elsewhere), so loading the export reads its base model from its "
                "package or the hub",
                stage,
            )
    manifest = {
        "musique_models": __version__,
        "source": run_dir.name,
        "stages": stages,
        "reused": reused,
        "files": file_checksums(partial),
    }
    write_json(partial / EXPORT_FILE, manifest)
    (partial / "README.md").write_text(model_card(run_dir, stages), encoding="utf-8")
