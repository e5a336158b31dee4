"""The documentation site's home page is the README, with links that work from the site."""

from __future__ import annotations

import importlib.util

from musique_models import PROJECT_ROOT

spec = importlib.util.spec_from_file_location("readme_hook", PROJECT_ROOT / "docs" / "_hooks" / "readme.py")
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)


def test_links_into_docs_become_site_links_and_other_files_their_path() -> None:
    readme = (
        "See [Models](docs/models.md#beam), ![plot](docs/paper_findings.png), [CHANGELOG.md](CHANGELOG.md), "
        "[the script](benchmarks/overfit.py), [paper](https://arxiv.org/abs/2108.00573) and [top](#quickstart)."
    )
    assert hook.readme_as_home(readme) == (
        "See [Models](models.md#beam), ![plot](paper_findings.png), `CHANGELOG.md`, "
        "the script (`benchmarks/overfit.py`), [paper](https://arxiv.org/abs/2108.00573) and [top](#quickstart)."
    )


def test_the_home_page_is_the_readme_not_a_copy_of_it() -> None:
    index = (PROJECT_ROOT / "docs" / "index.md").read_text()
    assert len(index.splitlines()) <= 2 and "README.md" in index
    mkdocs = (PROJECT_ROOT / "mkdocs.yml").read_text()
    assert "docs/_hooks/readme.py" in mkdocs

    class Page:
        class file:  # noqa: N801 (mkdocs' attribute name)
            src_uri = "index.md"

    home = hook.on_page_markdown(index, Page, {"config_file_path": str(PROJECT_ROOT / "mkdocs.yml")}, None)
    readme = (PROJECT_ROOT / "README.md").read_text()
    assert home.splitlines()[0] == readme.splitlines()[0] and "](docs/" not in home and len(home) > 0.9 * len(readme)


def test_the_settings_reference_lists_every_settings_module_found_beside_a_recipe() -> None:
    page = (PROJECT_ROOT / "docs" / "reference" / "settings.md").read_text()
    assert hook.SCHEMAS_MARKER in page and "::: musique_models.recipes." not in page  # nothing listed by hand

    class Page:
        class file:  # noqa: N801 (mkdocs' attribute name)
            src_uri = "reference/settings.md"

    built = hook.on_page_markdown(page, Page, {"config_file_path": str(PROJECT_ROOT / "mkdocs.yml")}, None)
    modules = sorted(path.stem for path in (PROJECT_ROOT / "musique_models" / "recipes").glob("*_settings.py"))
    assert [line.removeprefix("::: musique_models.recipes.") for line in built.splitlines() if line.startswith(":::")][
        1:
    ] == modules
