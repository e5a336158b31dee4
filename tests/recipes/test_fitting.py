"""The one way a recipe fits a stage (`musique_models.recipes.fitting.fit_stage`): no recipe builds its own
datamodule or runs a stage itself."""

from __future__ import annotations

import ast
from types import SimpleNamespace

from musique_models import PROJECT_ROOT

RECIPES = PROJECT_ROOT / "musique_models" / "recipes"
# what fitting a stage takes: only `fit_stage` may use them
STAGE_MACHINERY = {"run_stage", "QADataModule"}


def _imported_names(source: str) -> set[str]:
    return {
        alias.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom) for alias in node.names
    }


def test_every_recipe_fits_its_stages_through_fit_stage() -> None:
    recipes = sorted(path for path in RECIPES.glob("*.py") if path.name not in ("fitting.py", "__init__.py"))
    assert len(recipes) >= 6
    for path in recipes:
        assert not _imported_names(path.read_text()) & STAGE_MACHINERY, f"{path.name} fits a stage by itself"
    assert _imported_names((RECIPES / "fitting.py").read_text()) >= STAGE_MACHINERY


def test_a_config_saved_before_a_setting_existed_still_builds_its_recipe() -> None:
    from omegaconf import OmegaConf

    from musique_models.recipes.end2end import End2End
    from musique_models.recipes.select_answer import SelectAnswer
    from musique_models.recipes.select_answer_settings import AnswererSettings

    # config.yaml of a run made before `global_attention` and `input` were settings (evaluate.py run= loads it)
    End2End(reader=OmegaConf.create({"max_question_tokens": 150}))
    recipe = SelectAnswer(selector=OmegaConf.create({}), answerer=OmegaConf.create({"max_length": 512}), top_k=3)
    # the recipe's own fallback for the missing `input`: the default, "auto" (one input on a long backbone only)
    assert AnswererSettings.input == "auto"
    assert recipe._single_input(SimpleNamespace(max_length=4096)) and not recipe._single_input(
        SimpleNamespace(max_length=512)
    )


def test_a_setting_absent_from_a_saved_config_counts_as_null_on_resume() -> None:
    from omegaconf import OmegaConf

    from musique_models.training.run_checks import config_differences

    saved = OmegaConf.create({"paths": {}, "model": {"reader": {"lr": 1e-4}}})
    current = OmegaConf.create({"paths": {}, "model": {"reader": {"lr": 1e-4, "gradient_clip_val": None}}})
    assert config_differences(saved, current) == []
    current.model.reader.gradient_clip_val = 1.0
    assert config_differences(saved, current) == ["model.reader.gradient_clip_val"]
