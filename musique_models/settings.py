"""What a model's components are set with: each component's settings as a typed schema (a dataclass), registered
with Hydra's ConfigStore as `stage_settings/<name>`.

A schema lives beside its recipe, in a light module of `musique_models/recipes/` whose name ends in `_settings`
(`select_answer_settings.py`: `SelectorSettings`, `AnswererSettings`), and names itself with `config_name`. Those
modules import no torch: `register_stage_settings` finds and registers them before any config composes. This
module holds what they build on: `ComponentSettings` (a component with settings and nothing trained: the BM25
ranker of Lexical SA), `StageSettings` (a trained stage: optimisation, batches, epochs, validation) and two kinds
of trained stage shared by several recipes (`SingleInputSettings`, `GenerationSettings`).

A model config takes its stages' schemas in its defaults list (`- /stage_settings/selector@selector`), so every key
a stage reads has its type and default in its schema; the yaml sets only what it changes (interpolations of
the dataset's facts, sample-size settings). An unknown or misspelled key of a stage is refused before any work:
by Hydra when the config composes, or, given with `+` (which Hydra accepts even on a typed node), by `train.py`
(`unknown_settings`); either way in one line that names the key and the valid keys.

    python train.py model.answerer.lrr=1e-4
    error: model.answerer.lrr: AnswererSettings has no such setting (its settings: accumulate_grad_batches, ...)
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Optional

from hydra.core.config_store import ConfigStore

from musique_models.errors import MusiqueModelsError

# `Optional[...]`, not `X | None`: OmegaConf 2.3 reads only the former as an optional typed field.

SETTINGS_MODULE_SUFFIX = "_settings"
RECIPES_PACKAGE = "musique_models.recipes"


@dataclass
class ComponentSettings:
    """What every component of a model is set with: nothing in common. A component that trains nothing (no
    optimiser, no checkpoint; the BM25 ranker) subclasses this directly; `config_name` is the schema's name in
    `stage_settings/` (empty: a base, not registered)."""

    config_name: ClassVar[str] = ""


@dataclass
class StageSettings(ComponentSettings):
    """What every training stage reads: its backbone (a `conf/backbone` entry, instantiated by the recipe), the
    optimisation (AdamW at `lr`, `schedule` with `warmup_ratio`), batches (`micro_batch_size` rows a step times
    `accumulate_grad_batches`), epochs (`batches_per_epoch`: epochs of that many optimizer steps), clipping (the
    trainer's unless set), validation (`validate`, every `check_val_every_n_epoch` epochs) and early stopping
    (`patience` validations without improvement; null: the early-stopping callback's own patience)."""

    backbone: Any = None
    lr: Any = "${.backbone.learning_rate}"  # the backbone's rate (2e-5 for large encoders) unless set
    schedule: str = "linear"
    warmup_ratio: float = 0.1
    micro_batch_size: int = 8
    accumulate_grad_batches: int = 1
    max_epochs: int = 3
    batches_per_epoch: Optional[int] = None  # noqa: UP045 (see above)
    gradient_clip_algorithm: Optional[str] = None  # noqa: UP045
    gradient_clip_val: Optional[float] = None  # noqa: UP045
    patience: Optional[int] = 3  # noqa: UP045
    validate: bool = True
    check_val_every_n_epoch: int = 1


@dataclass
class SingleInputSettings(StageSettings):
    """A reader of all its paragraphs as ONE input (End2End; a Longformer answerer): the question, each paragraph
    and the whole input clipped to their token caps, global attention `before_context` (official) or on the
    `question`, spans of at most `max_answer_tokens` decoded (null: no cap)."""

    max_question_tokens: int = 150
    max_paragraph_tokens: int = 250
    max_document_tokens: int = 4000
    global_attention: str = "before_context"
    gradient_checkpointing: bool = True
    max_answer_tokens: Optional[int] = None  # noqa: UP045


@dataclass
class GenerationSettings(StageSettings):
    """A seq2seq stage: cross-entropy with `label_smoothing`, beam search of `num_beams` (1: greedy)."""

    label_smoothing: float = 0.1
    num_beams: int = 1


@dataclass
class OfficialFacts:
    """What counting a run's steps on a dataset's official files needs and no file of the sample holds
    (`python -m musique_models.plan`): questions per split, paragraphs per question, supporting paragraphs over a
    split (mean hops: supporting / questions), rows per question id (`twins`: 2 on MuSiQue-Full, each question with
    its unanswerable contrast), whether the questions have decompositions (Step Execution), and where the counts
    come from."""

    train_questions: int
    dev_questions: int
    paragraphs: int
    train_supporting: int
    dev_supporting: int
    twins: int = 1
    decompositions: bool = True
    source: str = ""


@dataclass
class DatasetSettings:
    """A `conf/dataset/<name>.yaml` (the `DatasetSource` it instantiates): its files (official and sample), format,
    training subsample, and what the readers take from it: `include_title` ("title || text" in the readers'
    inputs, as the official readers; never in the selector's) and `yes_no_answers` (yes/no comparison answers: the
    readers' `( yes | no )` prefix). `official`: the official files' counts for the plan (None: the plan cannot
    count runs on this dataset). A dataset config takes this schema first in its defaults list
    (`- dataset_schema`), so each of these has its type and default here, once."""

    _target_: str = "musique_models.data.source.DatasetSource"
    name: str = "???"
    display_name: str = "???"
    format: str = "???"
    data_dir: str = "???"
    files: dict[str, str] = field(default_factory=dict)
    sample: bool = False
    sample_files: dict[str, str] = field(default_factory=dict)
    unlabelled_splits: list[str] = field(default_factory=list)
    derived_sample: bool = False
    paired: bool = False
    train_size: Optional[int] = None  # noqa: UP045
    seed: int = 42
    cache_dir: str = ".cache/datasets"
    urls: dict[str, str] = field(default_factory=dict)
    hub_path: Optional[str] = None  # noqa: UP045
    download_help: str = ""
    include_title: bool = False
    yes_no_answers: bool = False
    official: Optional[OfficialFacts] = None  # noqa: UP045


def dataset_setting(dataset: Any, key: str) -> Any:
    """A run's dataset setting `key` (`cfg.dataset`), its `DatasetSettings` default when the config lacks it (a run
    saved before the setting existed)."""
    default = {item.name: item for item in fields(DatasetSettings)}[key]
    fallback = default.default_factory() if callable(default.default_factory) else default.default
    return dataset.get(key, fallback)


def schema_modules(package: str = RECIPES_PACKAGE) -> list[str]:
    """The light modules of `package` that hold component schemas (names ending in `_settings`), sorted."""
    found = importlib.import_module(package)
    return sorted(
        f"{package}.{module.name}"
        for module in pkgutil.iter_modules(found.__path__)
        if module.name.endswith(SETTINGS_MODULE_SUFFIX)
    )


def component_schemas(package: str = RECIPES_PACKAGE) -> dict[str, type[ComponentSettings]]:
    """Every named schema (`config_name`) of `package`'s settings modules, by name; two schemas of one name are an
    error naming both."""
    schemas: dict[str, type[ComponentSettings]] = {}
    for module_name in schema_modules(package):
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if (
                not (isinstance(value, type) and issubclass(value, ComponentSettings))
                or value.__module__ != module_name
            ):
                continue
            if not value.config_name:
                continue
            known = schemas.get(value.config_name)
            if known is not None and known is not value:
                raise MusiqueModelsError(
                    f"stage_settings/{value.config_name}: named by {known.__module__}.{known.__name__} and "
                    f"{module_name}.{value.__name__}; give one another config_name"
                )
            schemas[value.config_name] = value
    return schemas


def setting_names(schema: type[ComponentSettings]) -> list[str]:
    """The settings of a stage schema, sorted."""
    return sorted(item.name for item in fields(schema))


def register_stage_settings(package: str = RECIPES_PACKAGE) -> dict[str, type[ComponentSettings]]:
    """Register every schema of `package`'s settings modules as `stage_settings/<config_name>`, and the dataset
    configs' schema as `dataset/dataset_schema` (idempotent); the component schemas, by name."""
    store = ConfigStore.instance()
    store.store(group="dataset", name="dataset_schema", node=DatasetSettings)
    schemas = component_schemas(package)
    for name, schema in schemas.items():
        store.store(group="stage_settings", name=name, node=schema)
    return schemas


def unknown_settings(node: Any, prefix: str) -> list[tuple[str, type[ComponentSettings]]]:
    """(key, schema) of every key of a composed config's component nodes (typed by a `ComponentSettings` schema), at any
    depth under `node` (`prefix`: its own key), that its schema does not have: keys added with `+`, which Hydra
    accepts even on a typed node."""
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(node, DictConfig):
        return []
    schema = OmegaConf.get_type(node)
    if isinstance(schema, type) and issubclass(schema, ComponentSettings):
        known = set(setting_names(schema))
        return [(f"{prefix}.{key}", schema) for key in node if key not in known]
    found = []
    for key, value in node.items_ex(resolve=False):
        found += unknown_settings(value, f"{prefix}.{key}")
    return found
