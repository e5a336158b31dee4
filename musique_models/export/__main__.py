"""`python -m musique_models.export RUN_DIR --out DIR`: a finished run as one folder (weights in
safetensors, tokenizers, config, provenance, metrics, a model card); `musique_models.runs.load_run(DIR)` loads it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from musique_models.errors import user_errors_exit
from musique_models.export import export_run, push_to_hub


def main(argv: Sequence[str] | None = None) -> int:
    """Export the run; one line on stderr and exit 2 for a user error."""
    parser = argparse.ArgumentParser(prog="python -m musique_models.export", description=__doc__)
    parser.add_argument("run_dir", help="a finished train.py run folder")
    parser.add_argument("--out", required=True, help="the folder to write (new, or empty)")
    parser.add_argument("--push-to-hub", metavar="REPO", help="then upload it to the Hugging Face Hub as REPO")
    parser.add_argument("--private", action="store_true", help="with --push-to-hub: a private repository")
    args = parser.parse_args(argv)
    with user_errors_exit():
        out = export_run(args.run_dir, args.out)
        print(f"exported {args.run_dir} to {out}")
        if args.push_to_hub:
            print(f"pushed to {push_to_hub(out, args.push_to_hub, args.private)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
