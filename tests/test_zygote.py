"""The test client of the `train.py` fork server (`tests/zygote.py`) says why the server failed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import _Zygote

# a server that gets ready, then dies on the first request with an error of its own
DYING_SERVER = (
    "import json, sys\n"
    "print(json.dumps({'ready': True}), flush=True)\n"
    "sys.stdin.readline()\n"
    "sys.exit('the server broke: no fork today')\n"
)


def test_a_server_that_dies_is_reported_with_its_stderr(tmp_path: Path) -> None:
    zygote = _Zygote([sys.executable, "-c", DYING_SERVER])
    with pytest.raises(RuntimeError, match="(?s)the zygote .* ended; its stderr .*the server broke: no fork today"):
        zygote.run(["train.py"], tmp_path, {}, timeout=30, new_session=False)
    zygote.close()
