"""Every config composes and instantiates; the entry points run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from musique_models import PROJECT_ROOT
from musique_models.data.source import DatasetSource
from musique_models.data.summary import main as summary_main
from tests.conftest import DATASET_CONFIGS, run_python


@pytest.mark.parametrize("dataset", DATASET_CONFIGS)
def test_dataset_configs_compose_and_instantiate(dataset: str, compose_train_cfg) -> None:
    from hydra.utils import instantiate

    cfg = compose_train_cfg([f"dataset={dataset}", "dataset.sample=true"])
    source = instantiate(cfg.dataset)
    assert isinstance(source, DatasetSource) and source.name == dataset and source.train_size == 20000
    # HotpotQA's distractor test set is not public; the others have an unlabelled test split (leaderboards)
    has_test = dataset != "hotpotqa_20k"
    assert source.splits == ["train", "dev", *(["test"] if has_test else [])]
    assert [split for split in source.splits if not source.is_labelled(split)] == (["test"] if has_test else [])
    for split in source.splits:
        assert source.path(split).exists()
    official = instantiate(compose_train_cfg([f"dataset={dataset}", "dataset.sample=false"]).dataset)
    assert not official.sample
    assert official.path("dev") == official.data_dir / cfg.dataset.files.dev
    assert official.data_dir.parent == Path(cfg.paths.data_dir)


def test_embedded_default_is_select_answer_with_minilm_on_the_musique_ans_sample(compose_train_cfg) -> None:
    cfg = compose_train_cfg()
    assert cfg.dataset.name == "musique_ans" and cfg.dataset.sample is True
    assert cfg.model.name == "select_answer" and cfg.backbone.name == "minilm" and cfg.trainer.accelerator == "auto"
    # on the sample: small batches, no validation (nothing scored twice); on the official files: the paper's settings
    assert cfg.model.answerer.micro_batch_size * cfg.model.answerer.accumulate_grad_batches == 4
    assert cfg.model.selector.micro_batch_size == 2 and not cfg.model.selector.validate  # questions
    assert not cfg.model.answerer.validate
    paper = compose_train_cfg(["dataset=musique_full"])
    assert (
        paper.model.answerer.micro_batch_size * paper.model.answerer.accumulate_grad_batches == 16
    )  # the official answerer batch
    # the official selector batch: 12 questions on MuSiQue, 16 elsewhere
    assert paper.model.selector.micro_batch_size == 12 and paper.model.selector.check_val_every_n_epoch == 1
    assert compose_train_cfg(["dataset=hotpotqa_20k"]).model.selector.micro_batch_size == 16
    assert paper.model.selector.validate and paper.model.answerer.validate
    assert paper.model.selector.lr == 1e-4 and compose_train_cfg(["backbone=roberta_large"]).model.selector.lr == 2e-5


def test_summary_command_prints_the_table(capsys, tmp_path: Path) -> None:
    summary_main(["dataset=musique_full", "dataset.sample=true", f"paths.cache_dir={tmp_path}"])
    out = capsys.readouterr().out
    assert "MuSiQue-Full v1.0 [musique_full]" in out and "DERIVED" in out
    assert "│ questions" in out and "100" in out and "200" in out and "50.0%" in out


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return run_python([*args, f"paths.cache_dir={tmp_path}/cache", f"paths.log_dir={tmp_path}/logs"], timeout=300)


def test_train_without_a_model_prints_the_summary_and_says_so(tmp_path: Path) -> None:
    result = _run(["train.py", "~model"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "MuSiQue-Ans v1.0 [musique_ans] - shipped real sample" in result.stdout
    assert "No model is configured" in result.stderr + result.stdout
    saved = list((tmp_path / "logs").rglob("subsample_train_ids.json"))
    assert len(saved) == 1


def test_missing_official_files_exit_with_a_readable_message(tmp_path: Path) -> None:
    result = _run(["train.py", "dataset=2wiki_20k"], tmp_path)
    assert result.returncode == 2
    assert "error: 2WikiMultihopQA train file not found" in result.stderr
    assert "dataset.sample=true" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_import_evaluate_from_the_repo_root_gets_hugging_face_evaluate() -> None:
    code = "import evaluate; print(evaluate.__file__); print(callable(evaluate.load))"
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    location, has_load = result.stdout.split()
    assert Path(location).parent.name == "evaluate" and has_load == "True"


def test_evaluate_config_composes() -> None:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose("evaluate", overrides=["predictions=p.jsonl", "gold=g.jsonl", "mode=dire"])
    assert cfg.mode == "dire" and cfg.dataset is None and cfg.probe_predictions is None


MODEL_CONFIGS = sorted(path.stem for path in (PROJECT_ROOT / "conf" / "model").glob("*.yaml"))


@pytest.mark.parametrize("model", MODEL_CONFIGS)
def test_every_stage_of_every_model_config_is_typed(model: str, compose_train_cfg) -> None:
    from omegaconf import DictConfig, OmegaConf

    from musique_models.settings import ComponentSettings, StageSettings, setting_names

    extra = ["backbone=tiny_longformer"] if model in ("end2end", "c_only") else []
    cfg = compose_train_cfg([f"model={model}", *extra])
    stages = {
        key: node
        for key, node in cfg.model.items_ex(resolve=False)
        # not stages: the registry entry (musique_models/systems.py) and the per-dataset table
        if isinstance(node, DictConfig) and key not in ("system", "paper_settings")
    }
    assert stages
    for key, node in stages.items():
        schema = OmegaConf.get_type(node)
        assert issubclass(schema, ComponentSettings), f"model.{key} of model={model} has no component schema"
        assert sorted(node.keys()) == setting_names(schema)
        # what the recipe reads resolves with the schema's types (an interpolation of the dataset's facts included)
        typed = OmegaConf.to_object(node)
        assert isinstance(typed, schema)
        if issubclass(schema, StageSettings):  # a trained stage; a component that trains nothing has no epochs
            assert isinstance(typed.max_epochs, int) and isinstance(typed.validate, bool)


def test_per_dataset_settings_live_on_the_model_side(compose_train_cfg) -> None:
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationResolutionError

    for dataset in DATASET_CONFIGS:  # dataset configs hold facts about data only
        assert "paper_settings" not in compose_train_cfg([f"dataset={dataset}"]).dataset
    hotpot = compose_train_cfg(["dataset=hotpotqa_20k", "dataset.sample=false"]).model
    assert (hotpot.top_k, hotpot.selector.micro_batch_size, hotpot.selector.patience) == (3, 16, 3)
    assert hotpot.selector.max_epochs == hotpot.answerer.max_epochs == 10
    # a dataset the model does not list takes the `default` row; a row (or one key of it) can be given
    unlisted = compose_train_cfg(["dataset=hotpotqa_20k", "dataset.name=my_corpus", "dataset.sample=false"]).model
    assert (unlisted.top_k, unlisted.selector.max_epochs) == (7, 3)
    given = compose_train_cfg(["dataset.name=my_corpus", "+model.paper_settings.my_corpus={answerer_top_k: 4}"]).model
    assert given.top_k == 4 and given.selector.patience == 2
    execution = compose_train_cfg(["model=step_execution", "dataset=musique_ans", "dataset.sample=false"]).model
    assert execution.reader.single_support and execution.reader.batches_per_epoch == 2000
    assert execution.answerer.max_epochs == 3 and execution.reader.max_paragraph_tokens == 250
    broken = compose_train_cfg(["model=q_only", "~model.paper_settings.default", "dataset.name=my_corpus"])
    with pytest.raises(InterpolationResolutionError, match="no 'max_epochs' for dataset 'my_corpus' nor a default"):
        OmegaConf.to_container(broken.model, resolve=True)


def test_the_component_schemas_are_found_beside_their_recipes_without_importing_torch() -> None:
    code = (
        "import sys, musique_models\n"
        "from hydra.core.config_store import ConfigStore\n"
        "names = sorted(ConfigStore.instance().list('stage_settings'))\n"
        "print(','.join(names), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    from musique_models.settings import component_schemas

    schema_files = sorted((PROJECT_ROOT / "musique_models" / "recipes").glob("*_settings.py"))
    modules = {schema.__module__.rsplit(".", 1)[-1] for schema in component_schemas().values()}
    assert modules == {path.stem for path in schema_files}  # every settings module beside a recipe is found
    assert sorted(out[0].split(",")) == sorted(f"{name}.yaml" for name in component_schemas())
    assert out[1] == "False"  # registered before any config composes, with no torch import


def test_two_schemas_of_one_name_are_refused_naming_both(tmp_path: Path, monkeypatch) -> None:
    from musique_models.errors import MusiqueModelsError
    from musique_models.settings import component_schemas

    package = tmp_path / "toy_recipes"
    package.mkdir()
    (package / "__init__.py").write_text("")
    schema = (
        "from dataclasses import dataclass\nfrom typing import ClassVar\n"
        "from musique_models.settings import ComponentSettings\n\n"
        "@dataclass\nclass {name}(ComponentSettings):\n    config_name: ClassVar[str] = 'ranker'\n"
    )
    (package / "one_settings.py").write_text(schema.format(name="OneSettings"))
    (package / "not_a_schema_module.py").write_text("raise RuntimeError('never imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert list(component_schemas("toy_recipes")) == ["ranker"]
    (package / "two_settings.py").write_text(schema.format(name="TwoSettings"))
    with pytest.raises(
        MusiqueModelsError, match="stage_settings/ranker: named by toy_recipes.one_settings.OneSettings"
    ):
        component_schemas("toy_recipes")


def test_every_systems_contract_dataset_is_a_dataset_config() -> None:
    from musique_models.systems import registry

    assert {system.contract_dataset for system in registry().values()} <= set(DATASET_CONFIGS)
    assert len({system.contract_dataset for system in registry().values()}) == 4  # the models spread all four


def test_a_dataset_config_is_typed_by_its_schema(compose_train_cfg) -> None:
    from hydra.errors import ConfigCompositionException
    from omegaconf import OmegaConf

    from musique_models.settings import DatasetSettings, dataset_setting

    for dataset in DATASET_CONFIGS:
        assert OmegaConf.get_type(compose_train_cfg([f"dataset={dataset}"]).dataset) is DatasetSettings
    # a value of the wrong type is refused when the config composes (untyped, "sometimes" would read as true)
    with pytest.raises(ConfigCompositionException, match="include_title"):
        compose_train_cfg(["dataset.include_title=sometimes"])
    # a run saved before a key existed reads the schema's default
    assert dataset_setting(OmegaConf.create({"name": "old"}), "include_title") is False
    assert dataset_setting(OmegaConf.create({"include_title": True}), "include_title") is True
