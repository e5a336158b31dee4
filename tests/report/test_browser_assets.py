"""The error browser's page is files (`musique_models/report/browser/`: markup, CSS, script), read as package data
and linted: the CSS and the rendered page parse without an error, the script passes Node's syntax check, and the
page embeds each file as it is."""

from __future__ import annotations

import shutil
import subprocess

import html5lib
import pytest
import tinycss2

from musique_models import PROJECT_ROOT
from musique_models.report.browse import page_asset, render_page

ASSETS = PROJECT_ROOT / "musique_models" / "report" / "browser"


def test_the_page_embeds_each_file_as_it_is() -> None:
    page = render_page({"model": "m <x>", "dataset": "d", "split": "dev", "rows": []})
    for name in ("page.html", "page.css", "page.js"):
        assert page_asset(name) in page
    # shipped in a wheel too: package data
    assert '"report/browser/*"' in (PROJECT_ROOT / "pyproject.toml").read_text()
    assert "<title>Errors: m &lt;x&gt; on d dev</title>" in page


def test_the_css_parses_without_an_error() -> None:
    rules = tinycss2.parse_stylesheet(page_asset("page.css"), skip_comments=True, skip_whitespace=True)
    errors = [rule for rule in rules if rule.type == "error"]
    assert not errors and len(rules) > 30
    for rule in rules:  # every declaration of every rule parses too
        declarations = tinycss2.parse_blocks_contents(rule.content, skip_comments=True, skip_whitespace=True)
        assert not [item for item in declarations if item.type == "error"], tinycss2.serialize(rule.prelude)


def test_the_rendered_page_is_well_formed_html() -> None:
    page = render_page({"model": "m", "dataset": "d", "split": "dev", "rows": []})
    parser = html5lib.HTMLParser(strict=True)
    document = parser.parse(page)  # strict: raises on the first parse error
    assert not parser.errors and document.find(".//{http://www.w3.org/1999/xhtml}main") is not None


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_the_script_passes_nodes_syntax_check() -> None:
    result = subprocess.run(["node", "--check", str(ASSETS / "page.js")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_side_file_record_without_its_row_is_refused_and_nothing_is_declared(tmp_path) -> None:
    from musique_models.run_files import declared_side_files, write_side_file

    with pytest.raises(ValueError, match=r"toy.jsonl: record 1 has no `row` \(int\) and `id`"):
        write_side_file(tmp_path, "toy.jsonl", "toy", [{"row": 0, "id": "a"}, {"id": "b"}])
    assert declared_side_files(tmp_path) == [] and not (tmp_path / "toy.jsonl").exists()
    write_side_file(tmp_path, "toy.jsonl", "toy", [{"row": 0, "id": "a", "x": 1}])
    write_side_file(tmp_path, "other.jsonl", "other", [])
    write_side_file(tmp_path, "toy.jsonl", "toy again", [])  # declared again: its entry is replaced, not doubled
    assert declared_side_files(tmp_path) == [
        {"file": "other.jsonl", "title": "other"},
        {"file": "toy.jsonl", "title": "toy again"},
    ]
