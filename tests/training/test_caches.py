"""Caches of derived data are keyed by the code that made them: an edited featuriser, reader or converter never
reuses a stale entry."""

from __future__ import annotations

import ast
import hashlib
import importlib
import os
import sys
import time
from pathlib import Path

import datasets
from hydra.utils import instantiate
from omegaconf import OmegaConf

from musique_models import PROJECT_ROOT
from musique_models import io as io_module
from musique_models.data import source as source_module
from musique_models.data.source import DatasetSource
from musique_models.features.selector import featurize_selector
from musique_models.io import code_fingerprint, file_sha256
from musique_models.models.backbone import load_tokenizer
from musique_models.training import datamodule
from tests.conftest import SAMPLES


def test_code_fingerprint_follows_the_source(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "fp_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "featuriser.py").write_text("def f():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    before = {name: code_fingerprint(name) for name in ("fp_pkg", "fp_pkg.featuriser")}
    assert before == {name: code_fingerprint(name) for name in before}  # stable
    (package / "featuriser.py").write_text("def f():\n    return 2\n")
    after = {name: code_fingerprint(name) for name in ("fp_pkg", "fp_pkg.featuriser")}
    assert all(before[name] != after[name] for name in before)  # the package changes with any of its modules
    sys.modules.pop("fp_pkg", None)


def test_features_are_recomputed_when_the_featuriser_code_changes(tmp_path: Path, monkeypatch) -> None:
    tokenizer = load_tokenizer(instantiate(OmegaConf.load(PROJECT_ROOT / "conf/backbone/minilm.yaml")))
    table = datasets.Dataset.from_list(
        [{"question": "q?", "paragraphs": [{"idx": 0, "title": "t", "text": "some text", "is_supporting": True}]}]
    )
    settings = {"max_length": 64}
    first = datamodule.featurize(table, featurize_selector, tokenizer, tmp_path, "pairs", **settings)
    again = datamodule.featurize(table, featurize_selector, tokenizer, tmp_path, "pairs", **settings)
    assert again.cache_files == first.cache_files  # same code, same settings: reused
    real = datamodule.code_fingerprint
    # an edit to the answer normalisation the labels use (outside the features package) also makes new features
    monkeypatch.setattr(
        datamodule,
        "code_fingerprint",
        lambda *modules: real(*modules) + ("edited" if "musique_models.evaluation.metrics" in modules else ""),
    )
    edited = datamodule.featurize(table, featurize_selector, tokenizer, tmp_path, "pairs", **settings)
    assert edited.cache_files != first.cache_files and len(list(tmp_path.glob("pairs-*.arrow"))) == 2


def _package_imports(package: Path) -> set[str]:
    """The `musique_models` modules imported by the files of `package`, outside it and the foundation."""
    found = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("musique_models."):
                found.add(node.module)
    own = f"musique_models.{package.name}"
    return {m for m in found if not m.startswith(own) and m not in ("musique_models.errors", "musique_models.io")}


def test_feature_cache_key_covers_every_module_the_featurisers_import() -> None:
    imported = _package_imports(PROJECT_ROOT / "musique_models" / "features")
    assert imported and imported <= set(datamodule.FEATURE_CODE)


def test_reader_cache_key_covers_every_module_the_readers_import() -> None:
    data = PROJECT_ROOT / "musique_models" / "data"
    covered = set(source_module.READER_MODULES)
    for module in covered:
        tree = ast.parse((data / f"{module.rsplit('.', 1)[1]}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("musique_models.data."):
                assert node.module in covered, f"{module} imports {node.module}, which the cache key leaves out"


def test_parsed_splits_are_reparsed_when_the_reader_code_changes(tmp_path: Path, monkeypatch) -> None:
    source = DatasetSource(
        name="t",
        display_name="t",
        format="musique",
        data_dir="/",
        cache_dir=str(tmp_path),
        files={"dev": str(SAMPLES / "musique_ans" / "dev.jsonl")},
    )
    path = source.path("dev")
    digest = file_sha256(path)
    before = source._cache_path(path, digest)
    monkeypatch.setattr(source_module, "code_fingerprint", lambda *modules: "edited")
    assert source._cache_path(path, digest) != before


def test_file_digests_are_remembered_only_for_files_that_did_not_change(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(b"a" * 1000)
    first = file_sha256(path)
    mtime = path.stat().st_mtime_ns
    path.write_bytes(b"b" * 1000)
    os.utime(path, ns=(mtime, mtime))  # the same size and mtime, and maybe the same (coarse) ctime: just written
    assert first != file_sha256(path) == hashlib.sha256(b"b" * 1000).hexdigest()
    # a file that has not changed for a while is hashed once, then again only once it changed
    monkeypatch.setattr(io_module, "_SETTLED_NS", -1)
    hashed = []
    real = hashlib.sha256
    monkeypatch.setattr(io_module.hashlib, "sha256", lambda: hashed.append(1) or real())
    assert file_sha256(path) == file_sha256(path) and len(hashed) == 1
    time.sleep(0.05)  # past the clock tick of the file's ctime
    path.write_bytes(b"c" * 1000)
    os.utime(path, ns=(mtime, mtime))
    assert file_sha256(path) == real(b"c" * 1000).hexdigest() and len(hashed) == 2
