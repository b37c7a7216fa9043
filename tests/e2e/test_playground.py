"""The playground at / in a real headless browser (Debian's chromium, driven by Playwright; the
browser is never downloaded by a tool). The shared server runs with an API key, so the page
first shows that a key is needed, then works once the key is typed in.

TESSERA_SCREENSHOT_DIR, when set, receives screenshots of the page.
"""

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def page(base_url):
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: apt-get install chromium (tests/e2e/run.sh does)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1200, "height": 760})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{base_url}/")
        yield page
        assert not errors, f"JavaScript errors: {errors}"
        browser.close()


def shot(page, name):
    d = os.environ.get("TESSERA_SCREENSHOT_DIR")
    if d:
        page.screenshot(path=str(Path(d) / f"playground-{name}.png"))


def test_the_page_asks_for_the_key_then_shows_the_model(page, api_key, model):
    expect(page).to_have_title("Tessera playground")
    expect(page.locator("#model")).to_have_text("API key needed")
    page.fill("#api-key", api_key)
    page.dispatch_event("#api-key", "change")
    expect(page.locator("#model")).to_have_text(model)


def test_a_chat_message_gets_a_streamed_reply_with_its_figures(page):
    page.fill("#temperature", "0")
    page.fill("#max_tokens", "40")
    # Count the reply's text updates: a streamed reply grows in several steps.
    page.evaluate("""() => {
        window.replyUpdates = 0;
        new MutationObserver(() => { window.replyUpdates += 1; })
            .observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
    }""")
    page.fill("#input", "Write two sentences about the sea.")
    page.click("#send")
    reply = page.locator(".msg.assistant .content").last
    expect(page.locator(".msg.user").last).to_have_text("Write two sentences about the sea.")
    stats = page.locator(".msg.assistant .stats").last
    expect(stats).to_contain_text("cached)", timeout=60_000)  # the usage chunk, last
    expect(stats).to_contain_text("TTFT")
    expect(stats).to_contain_text("tok/s")
    expect(page.locator("#send")).to_be_enabled()
    assert reply.inner_text().strip(), "the reply has text"
    assert page.evaluate("window.replyUpdates") >= 5, "the reply arrived in pieces"
    expect(page.locator("#error")).to_be_hidden()
    shot(page, "chat")

    # A second turn sends the history along: the prompt now has a cached prefix.
    page.fill("#input", "And one about the sky.")
    page.click("#send")
    expect(page.locator(".msg.assistant")).to_have_count(2)
    expect(page.locator(".msg.assistant .stats").last).to_contain_text("cached)", timeout=60_000)
    text = page.locator(".msg.assistant .stats").last.inner_text()
    cached = int(text.split("(")[1].split(" cached")[0])
    assert cached > 0, text


def test_a_bad_setting_shows_the_servers_error(page):
    page.fill("#temperature", "-1")
    page.fill("#input", "Hello")
    page.click("#send")
    error = page.locator("#error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("HTTP 400")
    expect(error).to_contain_text("temperature")
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator("#input")).to_have_value("Hello")  # the turn is given back to fix and resend
    expect(page.locator(".msg.user")).to_have_count(2)
    shot(page, "error")
    page.fill("#temperature", "0.7")


def test_completion_mode_streams_a_continuation(page):
    page.click("label:has(#mode-completion)")
    expect(page.locator("#prompt")).to_be_visible()
    expect(page.locator("#input")).to_be_hidden()
    page.fill("#prompt", "The three primary colours are")
    page.fill("#max_tokens", "16")
    page.click("#send")
    expect(page.locator("#last-stats")).to_contain_text("cached)", timeout=60_000)
    expect(page.locator("#last-stats")).to_contain_text("tok/s")
    expect(page.locator("#error")).to_be_hidden()
    expect(page.locator("#output")).to_contain_text("The three primary colours are")
    assert page.locator("#output .gen").inner_text().strip(), "generated text is shown"
    shot(page, "completion")
