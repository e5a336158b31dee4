"""Kill a real run at many points, resume each, and require every end to be byte-identical to the uninterrupted run.

    python benchmarks/kill_resume.py [--points 40] [--seed 0] [--load 1] [--only 7] [--out DIR] [-- OVERRIDES...]

The run: Select+Answer on the real MiniLM, on the shipped MuSiQue-Ans sample, small enough to repeat many times
(`RUN` below: 12 training and 6 evaluation questions, both stages validating so that best checkpoints are
written, the default callbacks and `trainer.threads=auto`), under CPU load from `--load` other processes that spin
for the whole benchmark.

1. A census: one uninterrupted run that counts its events (training batches, validation batches, prediction
   passes over a table, checkpoint writes, renames of atomically written files) and is the reference.
2. `--points` kill points drawn with `--seed`: a signal (SIGKILL half the time, else SIGINT or SIGTERM) at the n-th
   event of a kind (n drawn over the census's count of that kind; before or after a checkpoint write or a rename),
   or, for a fifth of the points, at a time drawn over the run's wall time (half of those in its first 10 s: the
   start, before the run has a configuration). Each point runs in a fresh cache folder, so featurising and its cache writes are killed too.
3. Each killed attempt is resumed as a user resumes it (`ckpt_path=last`, the same arguments, no fault; run again
   when the kill left no run folder), and its `predictions.jsonl`, `metrics.json`, `selector_ranking.json` and each
   stage's best weights must equal the reference's, and its status must be `finished`.

Prints one line a point and the count (`40 kill points, 40 identical`); exit status 1 when any differs. A point
is replayed with the same `--seed` and `--only N`. Results go to `--out` (default `logs/kill_resume/<time>`):
`results.json` and every attempt's run folder (`--keep` keeps those of identical points too).

The faults are injected from outside the package: this script runs `train.py` under a small launcher (`--child`)
that wraps `torch.save`, `os.replace`, the Trainer's callbacks and `BatchPredictor.forward` to count events and
send the signal to its own process at the chosen one. Time points run plain `python train.py`. The benchmark runs
the train.py of its own checkout: copy the tree elsewhere to measure it while you edit this one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# This checkout's package, here and in every child (its train.py imports it): a copy of the tree can be measured
# while the tree it was copied from changes.
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
os.environ["PROJECT_ROOT"] = str(ROOT)
import musique_models  # noqa: E402, F401  (sets MKL_CBWR before any torch loads, here and in the children)

RUN = [
    "dataset.sample=true",
    "dataset.train_size=12",
    "eval_size=6",
    "model.selector.max_epochs=3",
    "model.selector.validate=true",
    "model.answerer.max_epochs=2",
    "model.answerer.validate=true",
    "trainer.enable_progress_bar=false",
]
EVENTS = ("train_batch", "val_batch", "predict_pass", "save", "rename")
SIGNALS = ("SIGKILL", "SIGKILL", "SIGINT", "SIGTERM")
COMPARED = ("predictions.jsonl", "metrics.json", "selector_ranking.json")
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}


@dataclass
class KillPoint:
    """Where an attempt is stopped: `signal` at the `n`-th `event` (`before` or `after` it, for writes), or after
    `seconds` of wall time (event `time`)."""

    index: int
    signal: str
    event: str
    n: int = 0
    when: str = "before"
    seconds: float = 0.0

    def describe(self) -> str:
        if self.event == "time":
            return f"{self.signal} at {self.seconds:.1f} s"
        return f"{self.signal} {self.when} {self.event} #{self.n}"


# ---------------------------------------------------------------------------------------------------------------
# The child: train.py with its events counted, and a signal sent at the chosen one.


def _child(fault: dict, argv: list[str]) -> None:
    """Run `train.py ARGV` in this process with `fault` armed (`{"event", "n", "when", "signal"}`, or
    `{"count": PATH}` to write the census of events to PATH at exit)."""
    import atexit
    import runpy

    counts = dict.fromkeys(EVENTS, 0)

    def hit(event: str, when: str) -> None:
        if when == "before":
            counts[event] += 1
        if fault.get("event") == event and fault.get("when") == when and counts[event] == fault["n"]:
            os.kill(os.getpid(), getattr(signal, fault["signal"]))

    def wrap(owner: object, name: str, event: str) -> None:
        original = getattr(owner, name)

        def wrapped(*args, **kwargs):
            hit(event, "before")
            result = original(*args, **kwargs)
            hit(event, "after")
            return result

        setattr(owner, name, wrapped)

    if "count" in fault:
        atexit.register(lambda: Path(fault["count"]).write_text(json.dumps(counts)))
    import pytorch_lightning as pl
    import torch

    from musique_models.training.inference import BatchPredictor

    wrap(torch, "save", "save")
    wrap(os, "replace", "rename")
    wrap(BatchPredictor, "forward", "predict_pass")

    class Events(pl.Callback):
        def on_train_batch_start(self, *args) -> None:
            hit("train_batch", "before")

        def on_validation_batch_start(self, *args) -> None:
            hit("val_batch", "before")

    trainer_init = pl.Trainer.__init__

    def init_with_events(self, *args, callbacks=None, **kwargs) -> None:
        trainer_init(self, *args, callbacks=[*(callbacks or []), Events()], **kwargs)

    pl.Trainer.__init__ = init_with_events
    sys.argv = [str(ROOT / "train.py"), *argv]
    sys.path[0] = str(ROOT)
    runpy.run_path(str(ROOT / "train.py"), run_name="__main__")


# ---------------------------------------------------------------------------------------------------------------
# The parent.


def _spin() -> None:
    while True:
        sum(range(10_000))


def _train(
    arguments: list[str], log: Path, fault: dict | None = None, signal_after: tuple[str, float] | None = None
) -> tuple[int, float]:
    """Run train.py (under the launcher when `fault` is given; else plain, sent `signal_after`'s signal after its
    seconds when given); its exit status and wall time. Output goes to `log`."""
    if fault is not None:
        command = [sys.executable, __file__, "--child", json.dumps(fault), "--", *arguments]
    else:
        command = [sys.executable, str(ROOT / "train.py"), *arguments]
    start = time.perf_counter()
    with log.open("a") as output:
        output.write(f"$ {' '.join(command)}\n")
        output.flush()
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, env={**os.environ, **OFFLINE}
        )
        if signal_after is not None:
            try:
                process.wait(timeout=signal_after[1])
            except subprocess.TimeoutExpired:
                process.send_signal(getattr(signal, signal_after[0]))
        code = process.wait()
    return code, time.perf_counter() - start


def _arguments(run_dir: Path, cache: Path, extra: list[str]) -> list[str]:
    return [*RUN, *extra, f"paths.cache_dir={cache}", f"hydra.run.dir={run_dir}"]


def _weights_digest(checkpoint: Path) -> str:
    """A digest of a checkpoint's weights (names, shapes, values): what a stage's best checkpoint computes with."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].contiguous()
        digest.update(name.encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def _ends(run_dir: Path) -> dict[str, str]:
    """What a finished run must share with the reference: the bytes of `COMPARED` and each stage's best weights."""
    ends = {}
    for name in COMPARED:
        path = run_dir / name
        ends[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "missing"
    for stage in sorted(run_dir.glob("*/stage.json")):
        best = run_dir / json.loads(stage.read_text())["best_checkpoint"]
        ends[f"{stage.parent.name} best weights"] = _weights_digest(best) if best.exists() else "missing"
    status = (
        json.loads((run_dir / "status.json").read_text()).get("status") if (run_dir / "status.json").exists() else None
    )
    ends["status"] = str(status)
    return ends


def _draw_points(count: int, seed: int, census: dict[str, int], wall: float) -> list[KillPoint]:
    rng = random.Random(seed)
    points = []
    kinds = [event for event in EVENTS if census.get(event)]
    for index in range(count):
        signal_name = rng.choice(SIGNALS)
        if index % 5 == 0:  # a fifth at a time: the first 10 s (the start) or anywhere in the run
            seconds = rng.uniform(0.5, 10.0) if index % 10 == 0 else rng.uniform(10.0, wall)
            points.append(KillPoint(index, signal_name, "time", seconds=seconds))
            continue
        event = kinds[index % len(kinds)] if index < 2 * len(kinds) else rng.choice(kinds)
        when = rng.choice(("before", "after")) if event in ("save", "rename") else "before"
        points.append(KillPoint(index, signal_name, event, n=rng.randint(1, census[event]), when=when))
    return points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load", type=int, default=1, help="processes spinning on a core for the whole benchmark")
    parser.add_argument("--only", type=int, action="append", help="replay only these points (with the same --seed)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the run folders of identical points too")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run (after --)")
    options = parser.parse_args()
    out = options.out or ROOT / "logs" / "kill_resume" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(options.load)]
    for spinner in spinners:
        spinner.start()
    try:
        return _benchmark(options, out)
    finally:
        for spinner in spinners:
            spinner.kill()


def _benchmark(options: argparse.Namespace, out: Path) -> int:
    print(f"load: {options.load} spinning process(es); results in {out}", flush=True)
    reference = out / "reference"
    census_file = out / "census.json"
    if not census_file.exists():
        shutil.rmtree(reference, ignore_errors=True)
        code, wall = _train(
            _arguments(reference, out / "cache-reference", options.overrides),
            out / "reference.log",
            fault={"count": str(census_file)},
        )
        if code != 0:
            print(f"the uninterrupted run failed ({code}): see {out / 'reference.log'}")
            return 1
        census = json.loads(census_file.read_text())
        census_file.write_text(json.dumps({**census, "wall_seconds": wall}))
    census = json.loads(census_file.read_text())
    wall = census.pop("wall_seconds")
    expected = _ends(reference)
    print(f"uninterrupted run: {wall:.1f} s; events: {census}", flush=True)
    points = _draw_points(options.points, options.seed, census, wall)
    if options.only:
        points = [point for point in points if point.index in options.only]
    results = []
    for point in points:
        folder = out / f"point-{point.index:03d}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        arguments = _arguments(folder / "run", folder / "cache", options.overrides)
        if point.event == "time":
            killed, killed_wall = _train(arguments, folder / "train.log", signal_after=(point.signal, point.seconds))
        else:
            fault = {"event": point.event, "n": point.n, "when": point.when, "signal": point.signal}
            killed, killed_wall = _train(arguments, folder / "train.log", fault=fault)
        # as a user does: resume the run in its folder, or, when the kill came before there was one, run it again
        resume = ["ckpt_path=last"] if (folder / "run").exists() else []
        resumed, resumed_wall = _train([*arguments, *resume], folder / "train.log")
        ends = _ends(folder / "run") if resumed == 0 else {}
        differing = sorted(key for key in expected if ends.get(key) != expected[key])
        identical = resumed == 0 and not differing
        result = {
            **asdict(point),
            "resumed_with": "ckpt_path=last" if resume else "a new run (no run folder was left)",
            "killed_exit": killed,
            "killed_seconds": round(killed_wall, 1),
            "resumed_exit": resumed,
            "resumed_seconds": round(resumed_wall, 1),
            "identical": identical,
            "differing": differing,
        }
        results.append(result)
        verdict = "identical" if identical else f"DIFFERS ({', '.join(differing) or f'exit {resumed}'})"
        print(
            f"#{point.index:03d} {point.describe():32s} killed: exit {killed:4d} after {killed_wall:5.1f} s | "
            f"resumed: exit {resumed} in {resumed_wall:5.1f} s | {verdict}",
            flush=True,
        )
        if identical and not options.keep:
            shutil.rmtree(folder)
    same = sum(result["identical"] for result in results)
    summary = {
        "points": len(results),
        "identical": same,
        "seed": options.seed,
        "load": options.load,
        "run": RUN + options.overrides,
        "uninterrupted_seconds": round(wall, 1),
        "census": census,
        "results": results,
    }
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{len(results)} kill points, {same} identical (seed {options.seed}, load {options.load})")
    return 0 if same == len(results) else 1


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        separator = sys.argv.index("--")
        _child(json.loads(sys.argv[2]), sys.argv[separator + 1 :])
    else:
        sys.exit(main())
