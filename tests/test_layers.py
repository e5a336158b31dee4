"""The package's import direction: data <- evaluation <- features <- models <- training <- recipes <- runs <- plan <- report <- export <- demo <- cli
(entry points).

A module may import its own layer and the layers below it, never a layer above. `errors`, `io`, `run_files` (the
run folder's file names), `settings` (what the components' settings schemas build on, and their discovery: it
imports `musique_models.recipes.*_settings` by name, the one string import, so those modules may import only the
foundation: checked below), `systems` (the registry of the model configs'
`system:` entries) and the package's `__init__` are the foundation every layer may use. Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from musique_models import PROJECT_ROOT

LAYERS = [
    "data",
    "evaluation",
    "features",
    "models",
    "training",
    "recipes",
    "runs",
    "plan",
    "report",
    "export",
    "demo",
    "cli",
]
FOUNDATION = {
    "musique_models",
    "musique_models.errors",
    "musique_models.io",
    "musique_models.run_files",
    "musique_models.settings",
    "musique_models.systems",
}
PACKAGE = PROJECT_ROOT / "musique_models"


def _layer(module: str) -> int:
    """-1 for the foundation, else the index of the module's layer."""
    if module in FOUNDATION:
        return -1
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "musique_models" or parts[1] not in LAYERS:
        raise AssertionError(f"{module} belongs to no layer: add it to LAYERS or FOUNDATION")
    return LAYERS.index(parts[1])


def _imports(path: Path, module_name: str | None = None) -> list[tuple[int, str]]:
    """(line, module) of every `musique_models` import in a file, at any depth; relative imports are resolved
    against `module_name` (the file's own module)."""
    found = []
    package = (module_name or "").split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = package[: len(package) - node.level + 1]
            names = [node.module] if node.module else [alias.name for alias in node.names]
            found.extend((node.lineno, ".".join([*base, name])) for name in names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "musique_models":  # `from musique_models import training` imports a layer
                found.extend(
                    (node.lineno, f"musique_models.{alias.name}" if alias.name in LAYERS else node.module)
                    for alias in node.names
                )
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return [(line, module) for line, module in found if module.split(".")[0] == "musique_models"]


def _module_name(path: Path) -> str:
    relative = path.relative_to(PROJECT_ROOT).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_belongs_to_a_layer() -> None:
    for path in SOURCES:
        _layer(_module_name(path))


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(PROJECT_ROOT)))
def test_no_module_imports_a_layer_above_its_own(path: Path) -> None:
    own = _layer(_module_name(path))
    upward = [
        f"{path.relative_to(PROJECT_ROOT)}:{line} imports {module}"
        for line, module in _imports(path, _module_name(path))
        if _layer(module) > own
    ]
    assert not upward, "\n".join(upward)


def test_the_checker_sees_upward_imports_absolute_relative_and_inside_functions(tmp_path: Path) -> None:
    offending = tmp_path / "offending.py"
    offending.write_text(
        "def f():\n    from musique_models.training.stage import run_stage\n"
        "from ..training import stage\nfrom ..recipes.base import RunContext\nfrom . import decoding\n"
    )
    found = sorted(_imports(offending, "musique_models.models.offending"))
    assert found == [
        (2, "musique_models.training.stage"),
        (3, "musique_models.training"),
        (4, "musique_models.recipes.base"),
        (5, "musique_models.models.decoding"),
    ]
    own = _layer("musique_models.models.offending")
    assert [line for line, module in found if _layer(module) > own] == [2, 3, 4]


SETTINGS_MODULES = sorted((PACKAGE / "recipes").glob("*_settings.py"))


@pytest.mark.parametrize("path", SETTINGS_MODULES, ids=lambda path: path.name)
def test_a_settings_module_imports_only_the_foundation(path: Path) -> None:
    # `musique_models.settings` (the foundation) imports these by name before any config composes: they must stay
    # light, and importing a layer from them would import it into every `import musique_models`
    imported = [module for _, module in _imports(path, _module_name(path))]
    assert imported and all(module in FOUNDATION for module in imported), imported
    source = path.read_text()
    assert "import torch" not in source and "from torch" not in source
