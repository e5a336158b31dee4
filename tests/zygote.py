"""A process that has imported the training stack once and forks a child for each `python train.py ...` a test runs.

A fresh `python train.py` spends most of a short test run importing torch, Lightning, transformers and datasets
(about 8 s on 2 cores); a child forked from this process starts with them imported. Each child is the command as
a user runs it otherwise: its own process (signals, exit status, process group), its working folder, environment,
`sys.argv` and standard streams; `train.py` runs as `__main__`. Only `train.py` goes through here: the other
tools import little, and a test of what an import does needs a fresh interpreter.

Protocol, one JSON line each way on the zygote's stdin / stdout: a request {argv, cwd, env, stdout, stderr,
new_session} is answered by {"pid": N} once the child is forked, then by {"status": waitpid status} when it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

PRELOADED = (
    "torch",
    "pytorch_lightning",
    "transformers",
    "datasets",
    "hydra",
    "musique_models.runs.train",
    "musique_models.recipes.select_answer",
    "musique_models.recipes.end2end",
    "musique_models.recipes.step_execution",
    "musique_models.recipes.question_only",
    "musique_models.training.stage",
    "musique_models.training.loggers",
    "musique_models.training.resume",
)


def _child(request: dict) -> None:
    """In the forked child: become the requested command, run it, and exit with its status."""
    import runpy
    import signal
    import traceback

    code = 0
    try:
        if request["new_session"]:
            os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        os.close(stdin)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        script = os.path.abspath(request["argv"][0])
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(script)
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:  # as the interpreter reports an uncaught error
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve() -> None:
    """Import the training stack, then fork one child per request read from stdin."""
    import importlib

    for module in PRELOADED:
        importlib.import_module(module)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"status": status}), flush=True)


if __name__ == "__main__":
    serve()
