"""mkdocs hook: the site's home page is the README (docs/index.md only names it), so the two never drift apart.

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


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """mkdocs' hook: the home page's markdown is the README's (`readme_as_home`); every other page is left as is."""
    if page.file.src_uri != "index.md":
        return markdown
    readme = Path(config["config_file_path"]).parent / "README.md"
    return readme_as_home(readme.read_text(encoding="utf-8"))
