"""Decoder-only LLMs shipped as one GGUF file (llama.cpp's format), expanded once into a plain transformers folder.

transformers reads a GGUF file itself (`from_pretrained(folder, gguf_file=...)`: the Llama config, the tokenizer
with its chat template, and the weights dequantised to float32), but slowly: about 20-40 s for SmolLM2-135M-Instruct
on 2 CPU cores. `ensure_expanded` does that once and writes the result as a plain folder (`config.json`,
`model.safetensors`, the tokenizer and its chat template) recording the GGUF's sha256; every later load reads the
folder in about half a second. The weights are the GGUF's quantised ones (SmolLM2's is 4-bit, Q4_1) expanded to
float32, not the original bf16 checkpoint's.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import transformers
from filelock import FileLock
from transformers import AutoModelForCausalLM, AutoTokenizer

from musique_models.io import atomic_folder, code_fingerprint, file_sha256

log = logging.getLogger(__name__)

RECORD = "expanded_from.json"


def ensure_expanded(gguf: str | Path, output_dir: str | Path, sha256: str | None = None) -> Path:
    """`output_dir` holding the GGUF file `gguf` (whose content has the already checked `sha256`; None: hashed here)
    expanded to a plain folder: built on first use (atomically: a killed build leaves nothing at `output_dir`), reused
    while its record names the same GGUF content, converter and transformers version, rebuilt otherwise. Processes
    that need it at once build it once: the others wait on a lock beside it."""
    gguf, output_dir = Path(gguf), Path(output_dir)
    wanted = {
        "gguf_sha256": sha256 or file_sha256(gguf),
        "code": code_fingerprint(__name__),
        "transformers": transformers.__version__,
    }
    if _expanded(output_dir, wanted):
        return output_dir
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    # one builder at a time (DDP ranks, the jobs of a sweep): the others wait, then find the folder built
    with FileLock(output_dir.parent / f"{output_dir.name}.lock"):
        if _expanded(output_dir, wanted):
            return output_dir
        for staging in output_dir.parent.glob(f".{output_dir.name}.*"):  # left by a build that was killed
            shutil.rmtree(staging, ignore_errors=True)
        _expand(gguf, output_dir, wanted)
    return output_dir


def _expanded(output_dir: Path, wanted: dict[str, str]) -> bool:
    record = output_dir / RECORD
    if not record.exists():
        return False
    found = json.loads(record.read_text())
    return all(found.get(key) == value for key, value in wanted.items())


def _expand(gguf: Path, output_dir: Path, wanted: dict[str, str]) -> None:
    log.info("expanding %s into a plain model folder at %s (once; later loads read the folder)", gguf.name, output_dir)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
    # a model loaded from GGUF refuses save_pretrained while it is marked quantised; its weights are float32 now
    del model.config.quantization_config
    model.hf_quantizer = None
    with atomic_folder(output_dir) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / RECORD).write_text(json.dumps({**wanted, "gguf_file": gguf.name}, indent=2) + "\n")
