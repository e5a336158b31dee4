"""The export format, both ways: a trained stage written as files (`write_stage`) and read back as the checkpoint its
recipe loads (`read_export`). `musique_models.export` composes the folder; `load_run` reads it through here.

A stage's folder:

    <stage>/backbone/                 its pretrained network as trained, in the Hugging Face layout (config.json,
                                      model.safetensors, tokenizer): stock `transformers` loads it (`AutoModel` for an
                                      encoder, `AutoModelForSeq2SeqLM`, `AutoModelForCausalLM`), and `load_run` reads
                                      it with no package and no hub (`BackboneSpec(source="saved")`)
    <stage>/model.safetensors         every other weight of the module (its heads)
    <stage>/musique_models_module.json   the module's hyperparameters as JSON (nothing pickled)

The tokenizer saved is the backbone's own: a module adds its paragraph marker (the decomposer its step tokens) when it
loads, as in training. A module keeps its pretrained network as `self.encoder` (an encoder) or `self.model` (an
encoder-decoder or a decoder-only LM): `BACKBONE_ATTRIBUTES`. A module that keeps it elsewhere, or whose network does
not round-trip through `save_pretrained`, is exported whole in `model.safetensors` (its tokenizer beside it) and
rebuilt from its backbone's package or hub model.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import shutil
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from musique_models.errors import MusiqueModelsError
from musique_models.io import file_sha256, write_json
from musique_models.run_files import EXPORT_FILE, STAGE_FILE

WEIGHTS_FILE = "model.safetensors"
MODULE_FILE = "musique_models_module.json"
BACKBONE_FOLDER = "backbone"
PICKLED = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")  # weights files that unpickle: never read from an export
# where a module keeps its pretrained network: `self.encoder` (an encoder, `load_encoder`) or `self.model` (an
# encoder-decoder, `load_seq2seq`, or a decoder-only LM, `load_causal_lm`)
BACKBONE_ATTRIBUTES = ("encoder", "model")
# The only classes an export's hyperparameters may name: reading an export never calls anything else.
EXPORT_DATACLASSES = {"musique_models.models.backbone.BackboneSpec"}


class ExportFormatError(MusiqueModelsError):
    """An export folder that cannot be read: a file outside it, a class it may not name, a missing file."""


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


def decode_hyperparameters(value: Any) -> Any:
    """`encode_hyperparameters` inverted: only the dataclasses of `EXPORT_DATACLASSES` are rebuilt, from their own
    fields; anything else is refused."""
    if isinstance(value, dict) and "__dataclass__" in value:
        path = str(value["__dataclass__"])
        if path not in EXPORT_DATACLASSES:
            raise ExportFormatError(f"an export names {path}; an export may name only {', '.join(EXPORT_DATACLASSES)}")
        module_name, _, class_name = path.rpartition(".")
        cls = getattr(importlib.import_module(module_name), class_name)
        fields = value.get("fields") or {}
        known = {item.name for item in dataclasses.fields(cls)}
        if not isinstance(fields, dict) or set(fields) - known:
            raise ExportFormatError(
                f"an export's {class_name} has fields it does not know: {sorted(set(fields) - known)}"
            )
        return cls(**{key: decode_hyperparameters(item) for key, item in fields.items()})
    if isinstance(value, dict):
        return {key: decode_hyperparameters(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode_hyperparameters(item) for item in value]
    return value


def reused_checkpoints(cfg: DictConfig) -> dict[str, str]:
    """The trained stages of other runs that a run's config reuses (`model.selector_checkpoint=PATH`, any
    `model.*_checkpoint`): config key -> checkpoint path."""
    found: dict[str, str] = {}

    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict):
            for name, item in node.items():
                if str(name).endswith("_checkpoint") and isinstance(item, str) and item:
                    found[f"{key}.{name}"] = item
                else:
                    walk(item, f"{key}.{name}")

    model = cfg.get("model")
    walk(OmegaConf.to_container(model, resolve=True) if model is not None else {}, "model")
    return found


def write_stage(checkpoint: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Write the stage whose checkpoint (`state_dict`, `hyper_parameters`) is `checkpoint` into `folder` (made); its
    entry in `export.json` (`whole`: the module in one file, its network read from its package or hub on load).

    The backbone goes to `backbone/` through `save_pretrained`; `model.safetensors` keeps the weights that folder
    does not hold. Before anything is relied on, the module's whole state dict is rebuilt from the files written and
    compared with the checkpoint's, tensor by tensor; a module whose backbone does not round-trip is exported whole
    (every weight in `model.safetensors`)."""
    import torch
    from safetensors.torch import save_file

    from musique_models.models.backbone import BackboneSpec

    weights = {key: tensor.contiguous() for key, tensor in checkpoint["state_dict"].items()}
    hyperparameters = dict(checkpoint.get("hyper_parameters") or {})
    folder.mkdir(parents=True)
    entry: dict[str, Any] = {"weights": f"{folder.name}/{WEIGHTS_FILE}", "module": f"{folder.name}/{MODULE_FILE}"}
    backbone = hyperparameters.get("backbone")
    saved = None
    if isinstance(backbone, BackboneSpec):
        saved = _save_backbone(backbone, int(hyperparameters.get("vocab_size") or 0), weights, folder / BACKBONE_FOLDER)
    if saved is None:
        return {**entry, **_write_whole(folder, weights, hyperparameters, backbone)}
    entry["backbone"] = {"folder": f"{folder.name}/{BACKBONE_FOLDER}", **saved}
    held = {saved["prefix"] + key for key in _saved_keys(folder / BACKBONE_FOLDER)} | set(saved["tied"])
    heads = {key: tensor for key, tensor in weights.items() if key not in held}
    entry["heads"] = sorted(heads)
    save_file({key: tensor.clone() for key, tensor in heads.items()}, folder / WEIGHTS_FILE, metadata={"format": "pt"})
    write_json(folder / MODULE_FILE, {"hyper_parameters": encode_hyperparameters(hyperparameters)})
    rebuilt = _stage_state_dict(folder.parent, entry)
    if rebuilt.keys() != weights.keys() or any(not _same(rebuilt[k], weights[k], torch) for k in weights):
        shutil.rmtree(folder)  # not this module's layout after all: the whole module in one file
        folder.mkdir()
        del entry["backbone"], entry["heads"]
        return {**entry, **_write_whole(folder, weights, hyperparameters, backbone)}
    return entry


def _write_whole(
    folder: Path, weights: dict[str, Any], hyperparameters: dict[str, Any], backbone: Any
) -> dict[str, Any]:
    """The module in one file (rebuilt from its package or hub model on load), its tokenizer beside it when it has a
    backbone; the entry's mark of it."""
    from safetensors.torch import save_file

    from musique_models.models.backbone import BackboneSpec, load_tokenizer

    if isinstance(backbone, BackboneSpec):
        load_tokenizer(backbone, paragraph_marker=False).save_pretrained(folder)
    save_file(
        {key: tensor.clone() for key, tensor in weights.items()}, folder / WEIGHTS_FILE, metadata={"format": "pt"}
    )
    write_json(folder / MODULE_FILE, {"hyper_parameters": encode_hyperparameters(hyperparameters)})
    return {"whole": True} if isinstance(backbone, BackboneSpec) else {}


def _save_backbone(backbone: Any, vocab_size: int, weights: dict[str, Any], folder: Path) -> dict[str, Any] | None:
    """Save the module's pretrained network (the weights under one of `BACKBONE_ATTRIBUTES`) in the Hugging Face
    layout into `folder`, built as the module builds it and given the trained weights; what reads it back (its
    prefix, its kind, the module's weights tied to a saved one), or None when the module keeps no such network."""
    import torch

    from musique_models.models.backbone import load_causal_lm, load_encoder, load_seq2seq, load_tokenizer

    for attribute in BACKBONE_ATTRIBUTES:
        prefix = f"{attribute}."
        own = {key[len(prefix) :]: tensor for key, tensor in weights.items() if key.startswith(prefix)}
        if own:
            break
    else:
        return None
    tokenizer = load_tokenizer(backbone, paragraph_marker=False)
    if attribute == "encoder":
        if backbone.causal:
            return None
        network = load_encoder(backbone, vocab_size)
        kind = "encoder"
    else:
        loader = load_causal_lm if backbone.causal else load_seq2seq
        network = loader(backbone, vocab_size, tokenizer)
        kind = "causal_lm" if backbone.causal else "seq2seq_lm"
    missing, unexpected = network.load_state_dict(own, strict=False)
    if unexpected or missing:
        return None  # not the network the loader builds
    # an encoder whose architecture has a pooler the modules dropped (`load_encoder`): stock loading says
    # `add_pooling_layer=False`
    without_pooler = hasattr(network, "pooler") and network.pooler is None
    network.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    on_disk = _saved_keys(folder)
    by_storage = {_view(own[key]): key for key in on_disk if key in own}
    tied = {}
    for key, tensor in own.items():
        if key in on_disk:
            continue
        twin = by_storage.get(_view(tensor))
        if twin is None:
            twin = next((k for k in on_disk if k in own and _same(own[k], tensor, torch)), None)
        if twin is not None:
            tied[prefix + key] = prefix + twin
    return {"prefix": prefix, "kind": kind, "tied": tied, **({"without_pooler": True} if without_pooler else {})}


def _view(tensor: Any) -> tuple[Any, ...]:
    """What makes two tensors one weight: the same storage, seen at the same place the same way."""
    return (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride())


def _same(left: Any, right: Any, torch: Any) -> bool:
    return left.shape == right.shape and left.dtype == right.dtype and bool(torch.equal(left, right))


def _saved_keys(folder: Path) -> set[str]:
    from safetensors import safe_open

    keys: set[str] = set()
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            keys.update(handle.keys())
    return keys


def _stage_state_dict(export_dir: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """A stage's whole state dict from its files: `model.safetensors`, the backbone folder's weights under their
    prefix, and the tied weights from the ones they share."""
    from safetensors.torch import load_file

    state = load_file(_inside(export_dir, entry["weights"]))
    backbone = entry.get("backbone")
    if backbone:
        folder = _inside(export_dir, backbone["folder"])
        pickled = sorted(path.name for pattern in PICKLED for path in folder.glob(pattern))
        if pickled or not any(folder.glob("*.safetensors")):
            raise ExportFormatError(
                f"{folder}: an export's network is read from safetensors only; found {', '.join(pickled) or 'none'}"
            )
        for path in sorted(folder.glob("*.safetensors")):
            state.update({backbone["prefix"] + key: tensor for key, tensor in load_file(path).items()})
        for key, twin in backbone["tied"].items():
            if twin not in state:
                raise ExportFormatError(f"{export_dir}: {EXPORT_FILE} ties {key} to {twin}, which no file holds")
            state[key] = state[twin]
    return state


def _inside(export_dir: Path, relative: str) -> Path:
    path = export_dir / relative
    if export_dir.resolve() not in path.resolve().parents:
        raise ExportFormatError(f"{export_dir}: {EXPORT_FILE} names {relative!r}, outside the export")
    if not path.exists():
        raise ExportFormatError(f"{export_dir}: {relative} is missing (an incomplete copy of the export?)")
    return path


KINDS = ("encoder", "seq2seq_lm", "causal_lm")  # a saved network's kind (the stock class that loads it)
UNCHECKED = ("README.md",)  # a model card may be edited before it is pushed; every other file is checksummed


def file_checksums(export_dir: Path) -> dict[str, str]:
    """The sha256 of every file of an export (but `export.json` and the model card), by path inside it."""
    return {
        path.relative_to(export_dir).as_posix(): file_sha256(path)
        for path in sorted(export_dir.rglob("*"))
        if path.is_file() and path.name != EXPORT_FILE and path.relative_to(export_dir).as_posix() not in UNCHECKED
    }


def read_manifest(export_dir: Path) -> dict[str, Any]:
    """`export.json`, its layout checked: one `ExportFormatError` naming the file and the field otherwise."""
    path = export_dir / EXPORT_FILE
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ExportFormatError(f"{path}: not readable as JSON ({error})") from None

    def fail(field: str, expected: str) -> None:
        raise ExportFormatError(f"{path}: `{field}` must be {expected}")

    if not isinstance(manifest, dict) or not isinstance(manifest.get("stages"), dict):
        fail("stages", "an object of stages")
    for stage, entry in manifest["stages"].items():
        if not str(stage).isidentifier() or not isinstance(entry, dict):
            fail(f"stages.{stage}", "an object, under a stage name")
        for key in ("weights", "module"):
            if not isinstance(entry.get(key), str):
                fail(f"stages.{stage}.{key}", "a path inside the export")
        network = entry.get("backbone")
        if network is None:
            continue
        prefixes = [f"{attribute}." for attribute in BACKBONE_ATTRIBUTES]
        if not isinstance(network, dict) or not isinstance(network.get("folder"), str):
            fail(f"stages.{stage}.backbone.folder", "a path inside the export")
        if network.get("prefix") not in prefixes:
            fail(f"stages.{stage}.backbone.prefix", f"one of {', '.join(prefixes)}")
        if network.get("kind") not in KINDS:
            fail(f"stages.{stage}.backbone.kind", f"one of {', '.join(KINDS)}")
        tied = network.get("tied")
        if not isinstance(tied, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tied.items()):
            fail(f"stages.{stage}.backbone.tied", "an object of weight names")
    for key in ("reused", "files"):
        value = manifest.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            fail(key, "an object of strings")
    for key, stage in manifest.get("reused", {}).items():
        if stage not in manifest["stages"] or not key.startswith("model.") or not key.endswith("_checkpoint"):
            fail(f"reused.{key}", "a model.*_checkpoint key naming a stage of the export")
    return manifest


def check_files(export_dir: Path, manifest: dict[str, Any]) -> None:
    """Every file `export.json` lists is there with its checksum, a stage's folder holds nothing else, and nothing in
    the export is a link: a missing, truncated, changed, added or linked file is one `ExportFormatError` naming it."""
    listed = set(manifest.get("files", {}))
    for path in sorted(export_dir.rglob("*")):
        relative = path.relative_to(export_dir).as_posix()
        if path.is_symlink():
            raise ExportFormatError(f"{path}: a link; an export holds its own files")
        in_stage = relative.split("/", 1)[0] in manifest["stages"]
        if listed and in_stage and path.is_file() and relative not in listed:
            raise ExportFormatError(f"{path}: not a file the export wrote ({EXPORT_FILE} does not list it)")
    for relative, expected in manifest.get("files", {}).items():
        path = _inside(export_dir, relative)
        if file_sha256(path) != expected:
            raise ExportFormatError(
                f"{path}: not the file the export wrote (its sha256 differs from {EXPORT_FILE}'s): changed or "
                "truncated since; export the run again"
            )


# Settings that would make transformers run code that came with a model: never taken from an export.
CODE_SETTINGS = ("trust_remote_code", "code_revision")


@functools.cache
def shipped_targets() -> frozenset[str]:
    """Every `_target_` the package's own configs (`conf/`) name: the only classes an export's config may name."""
    import yaml

    from musique_models import PROJECT_ROOT

    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("_target_"), str):
                found.add(node["_target_"])
            for item in node.values():
                walk(item)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for path in sorted((PROJECT_ROOT / "conf").rglob("*.yaml")):
        walk(yaml.safe_load(path.read_text()))
    return frozenset(found)


def check_config(config: Any, manifest: dict[str, Any], export_dir: Path) -> None:
    """What an export's `config.yaml` (`config`: as read, plain YAML) may ask of the machine that loads it. A run's
    config is saved resolved, so an export's holds no interpolation (`${...}`: a resolver could build anything).
    Under `model`, the recipe a shipped model config names at its root and `BackboneSpec` elsewhere, nested only in
    one another, and none of instantiate's other keys (`_args_`, `_partial_`, ...); elsewhere (never built by a load)
    classes the shipped configs name. No model code (`trust_remote_code`), no checkpoint but a reused stage the
    export holds. One `ExportFormatError` naming the key otherwise."""
    shipped = shipped_targets()
    recipes = recipe_targets()
    spec = "musique_models.models.backbone.BackboneSpec"
    reused = set(manifest.get("reused", {}))

    def refuse(key: str, why: str) -> None:
        raise ExportFormatError(
            f"{export_dir}/config.yaml: {key or 'the config'} {why}; load_run(..., trust_code=True) loads an export "
            "whose code you trust"
        )

    def walk(node: Any, key: str, under_model: bool, in_spec: bool) -> None:
        if isinstance(node, str) and "${" in node:
            refuse(key, "holds an interpolation (an export's config is saved resolved)")
        if isinstance(node, list):
            for position, item in enumerate(node):
                walk(item, f"{key}[{position}]", under_model, in_spec)
        if not isinstance(node, dict):
            return
        target = node.get("_target_")
        if target is not None:
            if not under_model:
                if target not in shipped:
                    refuse(key, f"names {target}, which no config of musique-models names")
            elif key == "model":
                if target not in recipes:
                    refuse(key, f"names {target}, which is no recipe of musique-models")
            elif target != spec:
                refuse(key, f"names {target}; under `model` an export's config may name only {spec}")
        elif in_spec:
            refuse(key, "is a setting of a backbone that is no BackboneSpec")
        for name, item in node.items():
            name = str(name)
            path = f"{key}.{name}" if key else name
            if under_model and name.startswith("_") and name not in ("_target_", "_convert_"):
                refuse(path, "is a key of instantiate's that no model config uses")
            if name in CODE_SETTINGS and item:
                refuse(path, "would run a model's own code")
            if name.endswith("_checkpoint") and isinstance(item, str) and item and path not in reused:
                refuse(path, f"={item} is a checkpoint outside the export")
            nested_spec = target == spec and name in ("tokenizer_from", "convert_from") and isinstance(item, dict)
            walk(item, path, under_model or path == "model", nested_spec)

    walk(config, "", False, False)


@functools.cache
def recipe_targets() -> frozenset[str]:
    """The recipe classes the shipped model configs (`conf/model/*.yaml`) name at their root."""
    import yaml

    from musique_models import PROJECT_ROOT

    return frozenset(
        str(target)
        for path in sorted((PROJECT_ROOT / "conf" / "model").glob("*.yaml"))
        if (target := (yaml.safe_load(path.read_text()) or {}).get("_target_"))
    )


def _stage_checkpoint(export_dir: Path, stage: str, entry: dict[str, Any], trust_code: bool) -> dict[str, Any]:
    """One stage of an export as the checkpoint its module loads from: hyperparameters (a saved network's
    `BackboneSpec` pointed at its folder) and the whole state dict."""
    import pytorch_lightning as pl

    from musique_models.models.backbone import BackboneSpec

    hyperparameters = decode_hyperparameters(
        json.loads(_inside(export_dir, entry["module"]).read_text())["hyper_parameters"]
    )
    original = hyperparameters.get("backbone")
    if entry.get("backbone"):
        if not isinstance(original, BackboneSpec):
            raise ExportFormatError(f"{export_dir}: stage {stage!r} has a saved network but no BackboneSpec")
        folder = _inside(export_dir, entry["backbone"]["folder"])
        if not (folder / "config.json").is_file():
            raise ExportFormatError(f"{folder}: no config.json (an incomplete copy of the export?)")
        for name in ("config.json", "tokenizer_config.json"):  # code that transformers would look for
            if (folder / name).is_file() and "auto_map" in json.loads((folder / name).read_text()):
                raise ExportFormatError(f"{folder / name}: names code of its own (auto_map); an export runs none")
        hyperparameters["backbone"] = BackboneSpec(
            name=original.name,
            source="saved",
            path=str(folder.resolve()),
            max_length=original.max_length,
            pooling=original.pooling,
            learning_rate=original.learning_rate,
            attention_window=original.attention_window,
            causal=original.causal,
        )
    elif isinstance(original, BackboneSpec) and not trust_code:
        for spec in (original, original.tokenizer_from, original.convert_from):
            if spec is not None and any(spec.config_overrides.get(name) for name in CODE_SETTINGS):
                raise ExportFormatError(f"{export_dir}: stage {stage!r}'s backbone would run a model's own code")
            if spec is not None and spec.source == "saved":  # only the export's own folders are (set above)
                raise ExportFormatError(f"{export_dir}: stage {stage!r}'s backbone names a saved folder of its own")
    return {
        "state_dict": _stage_state_dict(export_dir, entry),
        "hyper_parameters": hyperparameters,
        "pytorch-lightning_version": pl.__version__,
    }


def read_export(export_dir: Path, folder: Path, cfg: DictConfig, trust_code: bool = False) -> Path:
    """The export in `export_dir` laid out in `folder` as the run folder its recipe's `load` reads (every stage's
    weights and hyperparameters as its best checkpoint, beside the run's own files); `cfg` (the run's config) is
    pointed at the reused stages the export holds. A saved backbone is read from `export_dir` itself."""
    import torch
    from safetensors import SafetensorError

    manifest = read_manifest(export_dir)
    for path in export_dir.iterdir():
        if path.is_file():
            shutil.copy2(path, folder / path.name)
    reused = manifest.get("reused", {})
    for stage, entry in manifest["stages"].items():
        try:
            checkpoint = _stage_checkpoint(export_dir, stage, entry, trust_code)
        except ExportFormatError:
            raise
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError) as error:
            reason = " ".join(str(error).split())[:200] or type(error).__name__
            raise ExportFormatError(f"{export_dir}: stage {stage!r} cannot be read ({reason})") from None
        checkpoints = folder / stage / "checkpoints"
        checkpoints.mkdir(parents=True)
        torch.save(checkpoint, checkpoints / "best.ckpt")
        if stage in reused.values():  # another run's stage: the config names its checkpoint
            with open_dict(cfg):
                for key in [key for key, name in reused.items() if name == stage]:
                    OmegaConf.update(cfg, key, str(checkpoints / "best.ckpt"), merge=False)
        else:
            write_json(folder / stage / STAGE_FILE, {"best_checkpoint": f"{stage}/checkpoints/best.ckpt"})
    return folder
