"""The chat page in a real headless browser (Debian's chromium + chromedriver through Selenium): type a prompt, see
tokens stream in, send a second turn. Skipped where chromium, chromedriver or selenium is missing."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tg.llm import LLM
from tg.llm.server import make_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]  # fmt: skip


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver")
    if CHROMIUM is None or DRIVER is None:
        pytest.skip(
            "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
        )
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="tg-llm-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def url(tiny_llm: LLM) -> Iterator[str]:
    srv = make_server(tiny_llm, "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}/?max_tokens=12"
    srv.shutdown()
    srv.server_close()


def wait_for(predicate: Any, timeout: float = 240.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting for the page")


def test_chat_page_streams_two_turns(browser: Any, url: str, tiny_llm: LLM) -> None:
    from selenium.webdriver.common.by import By

    browser.get(url)
    wait_for(lambda: browser.find_element(By.ID, "model").text == tiny_llm.name)
    seen_lengths: list[list[int]] = []
    for turn, text in enumerate(["Hello there!", "And a second question?"]):
        browser.find_element(By.ID, "prompt").send_keys(text)
        browser.find_element(By.ID, "send").click()
        lengths: list[int] = []

        def finished(lengths: list[int] = lengths, turn: int = turn) -> bool:
            replies = browser.find_elements(By.CSS_SELECTOR, ".message.assistant")
            if len(replies) <= turn:
                return False
            lengths.append(len(replies[turn].text))
            return replies[turn].get_attribute("data-done") == "true"

        wait_for(finished)
        seen_lengths.append(lengths)
        assert not browser.find_elements(By.CSS_SELECTOR, ".message.error")
        users = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".message.user")]
        assert users[-1] == text and len(users) == turn + 1
    replies = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".message.assistant")]
    assert len(replies) == 2 and all(replies)
    # tokens appeared one after another: the reply grew through intermediate lengths while streaming
    assert any(len({n for n in lengths if 0 < n < max(lengths)}) >= 1 for lengths in seen_lengths)
    # the second turn was sent with the whole conversation: the server reused the cached first turn
    assert tiny_llm.stats.cached_tokens > 0
