"""docs/demo.png: the demo page of a trained run answering its first shipped sample question, in headless Chromium.

python benchmarks/demo_screenshot.py RUN_DIR docs/demo.png
"""

from __future__ import annotations

import os
import sys

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")

from playwright.sync_api import sync_playwright  # noqa: E402

from musique_models.demo import make_server, start_in_thread  # noqa: E402
from musique_models.runs.api import load_run  # noqa: E402

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


def main(run_dir: str, out: str, sample: int = 0) -> None:
    server = make_server(load_run(run_dir, device="cpu"), port=0)
    start_in_thread(server)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
            page = browser.new_page(viewport={"width": 1100, "height": 1400})
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
            page.wait_for_selector("body[data-ready=true]")
            page.select_option("#sample", str(sample))
            page.click("#answer-button")
            page.wait_for_selector("#result:not([hidden])")
            page.screenshot(path=out, full_page=False)
            browser.close()
    finally:
        server.shutdown()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
