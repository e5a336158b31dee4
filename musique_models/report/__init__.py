"""The comparison report: finished runs (run folders, multiruns, wandb) against the MuSiQue paper's figures.

`python -m musique_models.report PATH... [--out DIR] [--wandb PROJECT] [--wandb-dir DIR]` writes table.md,
table.tex, per_hop.md, dire.md, significance.md, paper.md and report.png (see `build.write_report`).
"""
