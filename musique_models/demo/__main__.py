"""`python -m musique_models.demo RUN_DIR [--host 127.0.0.1] [--port 7860] [--device cpu|cuda]`: a local page to ask
a trained run questions (see `musique_models.demo`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from musique_models.demo import serve
from musique_models.errors import user_errors_exit


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the demo; one line on stderr and exit 2 for a user error (a folder that is not a finished run)."""
    parser = argparse.ArgumentParser(prog="python -m musique_models.demo", description=__doc__)
    parser.add_argument("run_dir", help="a finished train.py run folder, or an export")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: this machine only)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None)
    args = parser.parse_args(argv)
    with user_errors_exit():
        serve(args.run_dir, args.host, args.port, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
