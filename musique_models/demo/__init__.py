"""A local demo page of a trained run: `python -m musique_models.demo RUN_DIR [--port 7860] [--host 127.0.0.1]`.

Paste a question and its paragraphs, or pick one of the shipped sample questions of the run's dataset, and get the
answer with its confidence, the supporting paragraphs highlighted, the chain (Beam SA) or the executed steps (Step
Execution), answerability, and the gold when the question has one. The server is the standard library's
(`http.server`; no extra package), bound to localhost unless `--host` says otherwise; the page (`demo/page/`: markup,
CSS, script) renders every text as text (never as HTML). Answers come from `load_run(RUN_DIR).predict`.

    GET  /           the page
    GET  /samples    the shipped sample questions of the run's dataset, with their gold
    POST /predict    {"question": str, "paragraphs": [{"title", "text"} | str]} -> the `Answer` as JSON
"""

from __future__ import annotations

import dataclasses
import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from musique_models.errors import MusiqueModelsError
from musique_models.runs.api import RunPredictor

SAMPLES = 20  # sample questions offered on the page
MAX_REQUEST_BYTES = 2_000_000


def page_file(name: str) -> str:
    """One of the page's files (`musique_models/demo/page/<name>`), read as package data."""
    return (resources.files("musique_models.demo") / "page" / name).read_text(encoding="utf-8")


def render_page() -> str:
    """The whole page: its markup with the CSS and the script inline."""
    return page_file("index.html").replace("/*CSS*/", page_file("demo.css")).replace("/*JS*/", page_file("demo.js"))


def sample_questions(model: RunPredictor, count: int = SAMPLES) -> list[dict[str, Any]]:
    """The first `count` dev questions of the run's dataset's shipped sample (the answerable row of a MuSiQue-Full
    pair), with their gold: answer, supporting paragraphs, answerability."""
    from hydra.utils import instantiate
    from omegaconf import open_dict

    dataset_cfg = model.cfg.dataset.copy()
    with open_dict(dataset_cfg):
        dataset_cfg.sample = True
    try:
        table = instantiate(dataset_cfg).load("dev")
    except MusiqueModelsError:
        return []  # a dataset without a shipped sample
    found, seen = [], set()
    for row in table:
        if row["id"] in seen or not row["answerable"]:
            continue
        seen.add(row["id"])
        found.append(
            {
                "id": row["id"],
                "question": row["question"],
                "paragraphs": [{"title": p["title"], "text": p["text"]} for p in row["paragraphs"]],
                "gold": {
                    "answer": row["answer"],
                    "support_idxs": [position for position, p in enumerate(row["paragraphs"]) if p["is_supporting"]],
                    "answerable": row["answerable"],
                },
            }
        )
        if len(found) == count:
            break
    return found


def make_server(model: RunPredictor, host: str = "127.0.0.1", port: int = 7860) -> ThreadingHTTPServer:
    """The demo's HTTP server for `model` (not started: `serve_forever`, or `start_in_thread`)."""
    page = render_page().encode("utf-8")
    samples = json.dumps(sample_questions(model)).encode("utf-8")
    lock = threading.Lock()  # one prediction at a time: the model is shared

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/":
                self._send(HTTPStatus.OK, page, "text/html; charset=utf-8")
            elif self.path == "/samples":
                self._send(HTTPStatus.OK, samples, "application/json")
            else:
                self._send(HTTPStatus.NOT_FOUND, b"{}", "application/json")

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/predict":
                self._send(HTTPStatus.NOT_FOUND, b"{}", "application/json")
                return
            try:
                length = int(self.headers.get("Content-Length") or "")
            except ValueError:
                self._send(HTTPStatus.LENGTH_REQUIRED, b'{"error": "a Content-Length is needed"}', "application/json")
                return
            if not 0 <= length <= MAX_REQUEST_BYTES:
                self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, b'{"error": "request too large"}', "application/json")
                return
            try:
                request = json.loads(self.rfile.read(length))
                if not isinstance(request, dict):
                    raise ValueError("the request must be a JSON object with `question` and `paragraphs`")
                with lock:
                    answer = model.predict(request.get("question"), request.get("paragraphs") or [])
                body, status = json.dumps(dataclasses.asdict(answer)), HTTPStatus.OK
            except (MusiqueModelsError, ValueError) as error:  # the request's fault: said in one line
                body, status = json.dumps({"error": str(error)}), HTTPStatus.BAD_REQUEST
            except Exception as error:  # noqa: BLE001 (the page must get an answer, not a dropped connection)
                body, status = (
                    json.dumps({"error": f"{type(error).__name__}: {error}"}),
                    HTTPStatus.INTERNAL_SERVER_ERROR,
                )
            self._send(status, body.encode("utf-8"), "application/json")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
            return  # quiet: the page's requests are not news

    return ThreadingHTTPServer((host, port), Handler)


def start_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    """Serve in a daemon thread (tests, notebooks); `server.shutdown()` stops it."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread


def serve(run_dir: str | Path, host: str = "127.0.0.1", port: int = 7860, device: str | None = None) -> None:
    """Load the run and serve its demo page until interrupted."""
    from musique_models.runs.api import load_run

    server = make_server(load_run(run_dir, device=device), host, port)
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: --host {host}: the demo is reachable from other machines, with no login", flush=True)
    print(f"demo of {run_dir} on http://{host}:{server.server_address[1]}/ (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
