"""The demo page in a real headless browser (Debian's Chromium, driven by Playwright): the page loads, a shipped
sample question is answered, the highlighted support is `predict`'s, the gold is shown, untrusted text stays text,
and the server listens on localhost unless told otherwise."""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from musique_models.demo import make_server, sample_questions, start_in_thread
from musique_models.runs.api import load_run
from tests.cli.test_score_run import full_run  # noqa: F401 (a tiny MuSiQue-Full Select+Answer run)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# CI installs Chromium (.ci/run): there the test never skips
needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists() and not os.environ.get("CI"), reason="Debian's chromium is not installed"
)
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


@pytest.fixture(scope="module")
def demo(full_run: Path) -> Iterator[tuple[str, object]]:  # noqa: F811
    model = load_run(full_run, device="cpu")
    server = make_server(model, port=0)  # the default host
    assert server.server_address[0] == "127.0.0.1"  # this machine only, unless --host says otherwise
    start_in_thread(server)
    yield f"http://127.0.0.1:{server.server_address[1]}/", model
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


@pytest.mark.slow
@needs_chromium
def test_a_sample_question_is_answered_with_predicts_support_highlighted(demo, browser, tmp_path: Path) -> None:
    url, model = demo
    page = browser.new_page()
    page.goto(url)
    page.wait_for_selector("body[data-ready=true]")
    sample = sample_questions(model)[0]
    page.select_option("#sample", "0")
    assert page.input_value("#question") == sample["question"]
    page.click("#answer-button")
    page.wait_for_selector("#result:not([hidden])")
    expected = model.predict(sample["question"], sample["paragraphs"])
    highlighted = [
        int(idx) for idx in page.eval_on_selector_all(".paragraph.support", "els => els.map(e => e.dataset.idx)")
    ]
    assert highlighted == sorted(expected.support_idxs) and highlighted
    assert page.text_content("#answer") == (expected.answer or "(empty)")
    assert page.text_content("#gold") == sample["gold"]["answer"]
    gold = [int(idx) for idx in page.eval_on_selector_all(".paragraph.gold", "els => els.map(e => e.dataset.idx)")]
    assert gold == sample["gold"]["support_idxs"]
    shot = tmp_path / "demo.png"
    page.screenshot(path=str(shot), full_page=False)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("MUSIQUE_MODELS_DEMO_SCREENSHOT"):  # how docs/demo.png was made
        shutil.copy(shot, os.environ["MUSIQUE_MODELS_DEMO_SCREENSHOT"])


@pytest.mark.slow
@needs_chromium
def test_untrusted_text_is_shown_as_text_never_run(demo, browser) -> None:
    url, _ = demo
    page = browser.new_page()
    page.goto(url)
    page.wait_for_selector("body[data-ready=true]")
    hostile = '<img src=x onerror="document.body.dataset.pwned=1">'
    page.fill("#question", f"Who wrote {hostile}?")
    page.fill("#paragraphs", f"{hostile}\nA paragraph that says {hostile} in its text.")
    page.click("#answer-button")
    page.wait_for_selector("#result:not([hidden])")
    assert page.eval_on_selector_all("#shown-paragraphs img", "els => els.length") == 0
    assert page.text_content("#shown-paragraphs .title") == hostile
    assert page.evaluate("document.body.dataset.pwned") is None


@pytest.mark.slow
def test_the_server_listens_on_localhost_and_refuses_bad_input_in_one_line(demo) -> None:
    url, _ = demo
    assert url.startswith("http://127.0.0.1:")
    request = urllib.request.Request(
        url + "predict", data=json.dumps({"question": "q", "paragraphs": []}).encode(), method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request)
    assert refused.value.code == 400
    assert "paragraphs must be a non-empty list" in json.loads(refused.value.read())["error"]
    for body, message in [(b"[1, 2]", "must be a JSON object"), (b"{not json", "Expecting property name")]:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url + "predict", data=body, method="POST"))
        assert refused.value.code == 400 and message in json.loads(refused.value.read())["error"]
    samples = json.loads(urllib.request.urlopen(url + "samples").read())
    assert samples and all(sample["gold"]["answerable"] for sample in samples)
