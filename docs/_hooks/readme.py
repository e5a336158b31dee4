"""mkdocs hook: the site's home page is the README (docs/index.md only names it), so the two never drift apart;
and the settings reference lists every settings module beside a recipe, found as `register_stage_settings` finds
them.

Links into docs/ become site links (`docs/models.md` -> `models.md`); links to other files of the repository
(`CHANGELOG.md`, `benchmarks/...`), which the site does not hold, become their path in code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def _site_link(match: re.Match[str]) -> str:
    image, text, target = match.groups()
    if target.startswith(("http://", "https://", "#", "mailto:")):
        return match.group(0)
    if target.startswith("docs/"):
        return f"{image}[{text}]({target.removeprefix('docs/')})"
    return f"{text} (`{target}`)" if text and text != target else f"`{target}`"


def readme_as_home(readme: str) -> str:
    """The README's markdown with its links made to work from the site's home page."""
    return LINK.sub(_site_link, readme)


SCHEMAS_MARKER = "<!-- every settings module beside a recipe -->"


def settings_references(root: Path) -> str:
    """An API reference entry for every settings module beside a recipe (`musique_models/recipes/*_settings.py`),
    so that a new model's schemas are documented with no edit to the page."""
    modules = sorted(path.stem for path in (root / "musique_models" / "recipes").glob("*_settings.py"))
    return "\n\n".join(f"::: musique_models.recipes.{module}" for module in modules)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """mkdocs' hook: the home page's markdown is the README's (`readme_as_home`); the settings reference lists
    every settings module (`settings_references`); every other page is left as is."""
    root = Path(config["config_file_path"]).parent
    if page.file.src_uri == "index.md":
        return readme_as_home((root / "README.md").read_text(encoding="utf-8"))
    if SCHEMAS_MARKER in markdown:
        return markdown.replace(SCHEMAS_MARKER, settings_references(root))
    return markdown
