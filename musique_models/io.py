"""Small file helpers shared by every writer: outputs are written atomically."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import tempfile
import time
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import msgspec


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary file beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(tmp_name, 0o666 & ~_current_umask())  # mkstemp makes 0600; give the file normal permissions
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """A temporary folder beside `path` to fill; it replaces `path` (and whatever was there) only if the block
    succeeds, so that a reader never finds a half-written folder at `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    os.chmod(staging, 0o777 & ~_current_umask())  # mkdtemp makes 0700; give the folder normal permissions
    try:
        yield staging
        if path.exists():
            shutil.rmtree(path)
        os.replace(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while building many small acyclic objects.

    Reading and scoring 100,000 instances allocates millions of objects; the collector's repeated full scans
    cost about a third of the time and free nothing (no reference cycles are made). Reference counting still
    frees everything as usual.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: str | Path, obj: Any, indent: int | None = 2) -> None:
    """Write one JSON document atomically."""
    with atomic_open(path) as handle:
        json.dump(obj, handle, indent=indent, ensure_ascii=False)
        handle.write("\n")


def write_jsonl(path: str | Path, rows: Iterable[Any]) -> None:
    """Write one JSON object per line (UTF-8, compact), atomically."""
    encoder = msgspec.json.Encoder()
    with atomic_open(path, "wb") as handle:
        for row in rows:
            handle.write(encoder.encode(row))
            handle.write(b"\n")


# Digests of files this process hashed, by the file's identity and change times: a packaged backbone's weights are
# checked at every load (MiniLM's 90 MB take a quarter second a time). A write changes the ctime, which no program can
# set back; a file changed within the last seconds is not kept (timestamps are coarser than the writes can be).
_DIGESTS: dict[tuple[int, int, int, int, int], str] = {}
_SETTLED_NS = 2_000_000_000


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's content (hex), read in 4 MiB blocks."""
    stat = os.stat(path)
    key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key in _DIGESTS:
        return _DIGESTS[key]
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    if time.time_ns() - max(stat.st_mtime_ns, stat.st_ctime_ns) > _SETTLED_NS:
        _DIGESTS[key] = digest.hexdigest()
    return digest.hexdigest()


def code_fingerprint(*modules: str) -> str:
    """A short sha256 of the source code of the named modules (a package counts with every module in it).

    Caches of derived data (parsed splits, features, converted models) put it in their key, so that editing the
    code that produced them can never silently reuse a stale entry.
    """
    import importlib.util

    digest = hashlib.sha256()
    for module in sorted(modules):
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise ValueError(f"no source for module {module!r}")
        origin = Path(spec.origin)
        files = sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
        for path in files:
            digest.update(f"{module}:{path.relative_to(origin.parent)}".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def checkpoint_problem(path: str | Path) -> str | None:
    """Why the checkpoint at `path` cannot be used, in a few words (`truncated: ...`, `corrupted: ...`, `missing`),
    or None when it is whole. A torch checkpoint is a zip archive whose members carry CRC-32 checksums: every member is
    read and checked (torch.load itself checks none, and reads a cut file as a traceback)."""
    path = Path(path)
    if not path.is_file():
        return "missing"
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except zipfile.BadZipFile as error:
        return f"truncated or not a checkpoint ({path.stat().st_size} bytes; {error})"
    except (OSError, EOFError, zlib.error, ValueError) as error:
        return f"truncated ({error})"
    if damaged is not None:
        return f"corrupted (the checksum of its member {damaged} does not match)"
    return None
