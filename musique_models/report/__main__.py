"""`python -m musique_models.report PATH... [--out DIR] [--wandb PROJECT] [--wandb-dir DIR]`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from musique_models.errors import user_errors_exit
from musique_models.report.build import collect_runs, default_out_dir, write_report


def main(argv: Sequence[str] | None = None) -> int:
    """Find the finished runs, write the report, print where it went (warnings about skipped runs on stderr)."""
    parser = argparse.ArgumentParser(prog="python -m musique_models.report", description=__doc__)
    parser.add_argument("paths", nargs="*", help="run folders, multirun folders or any folder above them")
    parser.add_argument("--out", help="output folder (default reports/<time>/)")
    parser.add_argument("--wandb", metavar="PROJECT", help="also read the finished runs of this online wandb project")
    parser.add_argument("--wandb-dir", metavar="DIR", help="also read the offline wandb runs (offline-run-*) under DIR")
    args = parser.parse_args(argv)
    with user_errors_exit():
        runs, warnings = collect_runs(args.paths, wandb_dir=args.wandb_dir, wandb_project=args.wandb)
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        out_dir = write_report(runs, args.out or default_out_dir())
    print(f"report of {len(runs)} run{'' if len(runs) == 1 else 's'}: {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
