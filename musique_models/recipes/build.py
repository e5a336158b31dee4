"""The recipe a run's config names (`model=<name>`), built without its registry entry and paper settings."""

from __future__ import annotations

import copy
import inspect
import logging
from typing import TYPE_CHECKING

from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, open_dict

from musique_models.errors import (
    RunConfigError,
    no_such_setting_message,
)

if TYPE_CHECKING:
    from musique_models.recipes.base import Recipe

log = logging.getLogger(__name__)


def instantiate_recipe(cfg: DictConfig) -> Recipe:
    """The recipe `cfg.model` configures (`model=<name>`); its `system` entry is the registry's
    (`musique_models.systems`) and its `paper_settings` table the config's own (read by `${paper_setting:}`),
    not the recipe's."""
    from musique_models.recipes.base import Recipe

    model = copy.copy(cfg.model)  # a shallow copy keeps the root: interpolations still resolve
    with open_dict(model):
        model.pop("system", None)
        model.pop("paper_settings", None)
    recipe_class = get_class(model._target_)
    parameters = inspect.signature(recipe_class).parameters
    if not any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters.values()):
        # Hydra's own keys (`_target_`, `_convert_`, `_recursive_`, ...) are instantiate's, not the recipe's
        unknown = [str(key) for key in model if not str(key).startswith("_") and key not in parameters]
        if unknown:
            settings = [name for name in parameters if name != "self"]
            raise RunConfigError(
                "; ".join(no_such_setting_message(f"model.{key}", recipe_class.__name__, settings) for key in unknown)
            )
    recipe = instantiate(model, _recursive_=False)
    if not isinstance(recipe, Recipe):
        raise RunConfigError(f"model={cfg.model_name}: {cfg.model._target_} is not a recipe (needs name, fit and load)")
    return recipe
