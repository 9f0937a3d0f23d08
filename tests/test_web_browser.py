"""The search page in a real browser: Debian's headless Chromium driven by Selenium through
chromedriver, against `sharecrawl serve` on a crawled LAN of real media. Screenshots go to
the test's temporary folder (its path is printed; `pytest -s` shows it)."""

from __future__ import annotations

import itertools
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.test_web_lan import HOSTILE_NAME, HOSTILE_TITLE, Server, server, web_lan

__all__ = ["server", "web_lan"]  # module fixtures used here

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="Chromium is not installed: `make test-deps` (as root) installs Debian's chromium "
    "and chromium-driver",
)

# Root needs --no-sandbox; the rest keep Chromium from reaching for the network, which on a
# closed machine makes it hang.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1100",
    "--autoplay-policy=no-user-gesture-required",  # players start without a click
)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("screenshots")
    print(f"\nscreenshots of the search page: {folder}")
    return folder


def start_chromium(profile: Path, network_log: bool = False) -> WebDriver:
    """Headless Chromium with its own profile folder; its console log kept, and with
    `network_log` its DevTools network events (`get_log("performance")`)."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    logs = {"browser": "ALL"} | ({"performance": "ALL"} if network_log else {})
    options.set_capability("goog:loggingPrefs", logs)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    return driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


def wait_for(condition: Callable[[], object], timeout: float = 15) -> object:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except Exception:  # an element replaced while we looked: look again
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {condition}")
        time.sleep(0.05)


def loads(driver: WebDriver) -> int:
    """How many times the script has rendered an API answer."""
    return int(driver.execute_script("return Number(document.body.dataset.loaded || 0)"))


def titles(driver: WebDriver) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#results .work .title")]


def api_calls(driver: WebDriver) -> list[str]:
    return driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => n.includes('/api/search'))"
    )


DEBOUNCE_MS = 250  # app.js waits this long after the last key press

# the page's own clock at every input event of the search box
INPUT_TIMES = """
window.inputTimes = [];
document.getElementById("q").addEventListener("input", () => inputTimes.push(performance.now()));
"""


def pauses(driver: WebDriver) -> list[float]:
    """Milliseconds between consecutive input events since INPUT_TIMES was installed."""
    times = driver.execute_script("return window.inputTimes")
    return [b - a for a, b in itertools.pairwise(times)]


def console_problems(driver: WebDriver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_typing_updates_the_results_debounced(browser, server: Server, shots: Path) -> None:
    browser.get(server.url + "/")
    assert "New albums" in browser.find_element(By.ID, "results").text
    browser.save_screenshot(str(shots / "new.png"))
    box = browser.find_element(By.ID, "q")
    browser.execute_script(INPUT_TIMES)
    box.send_keys("madonna")  # seven key presses in a burst, as a person typing fast
    wait_for(lambda: loads(browser) >= 1 and "Frozen" in titles(browser))
    time.sleep(0.6)  # any late request would show up now
    calls = api_calls(browser)
    assert calls[-1].endswith("/api/search?q=madonna")
    # a request per pause of the debounce's length: one, unless the machine stalled the
    # typing itself (the pauses are measured by the page, with a margin for its timers)
    gaps = pauses(browser)
    assert len(gaps) == 6
    assert 1 + sum(g > DEBOUNCE_MS + 150 for g in gaps) <= len(calls)
    assert len(calls) <= 1 + sum(g >= DEBOUNCE_MS - 20 for g in gaps), (gaps, calls)
    assert set(titles(browser)) == {"Frozen", "Music"}
    assert browser.current_url.endswith("/?q=madonna")
    assert "Madonna" in browser.find_element(By.ID, "facets").text or titles(browser)
    browser.save_screenshot(str(shots / "typing.png"))
    assert console_problems(browser) == []  # nothing refused by the CSP, no script errors


def test_offline_copies_toggle_greyed(browser, server: Server, shots: Path) -> None:
    browser.get(server.url + "/?q=frozen")
    hosts = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".copy .host")]
    assert hosts == ["lab-1", "lab-2"]
    before = loads(browser)
    browser.find_element(By.ID, "offline").click()
    wait_for(lambda: loads(browser) > before)
    copies = browser.find_elements(By.CSS_SELECTOR, "#results li.copy")
    assert [c.find_element(By.CLASS_NAME, "host").text for c in copies][-1] == "lab-3"
    offline = browser.find_element(By.CSS_SELECTOR, "li.copy.offline .host")
    assert offline.value_of_css_property("color") == "rgba(160, 174, 192, 1)"  # greyed
    assert "offline=1" in browser.current_url
    browser.save_screenshot(str(shots / "offline.png"))
    browser.find_element(By.ID, "offline").click()
    wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#results li.copy")) == 2)


def test_clicking_a_facet_adds_its_field(browser, server: Server, shots: Path) -> None:
    browser.get(server.url + "/?q=madonna")
    before = loads(browser)
    links = browser.find_elements(By.CSS_SELECTOR, '[data-facet="format"] a')
    assert [a.text for a in links] == ["MP3", "FLAC"]  # most works first
    links[1].click()
    wait_for(lambda: loads(browser) > before)
    assert browser.find_element(By.ID, "q").get_attribute("value") == "madonna format:flac"
    assert titles(browser) == ["Frozen"]
    active = browser.find_element(By.CSS_SELECTOR, "#facets a.active")
    assert active.text == "FLAC"
    browser.save_screenshot(str(shots / "facet.png"))
    browser.back()  # the facet was a step in the history
    wait_for(lambda: browser.find_element(By.ID, "q").get_attribute("value") == "madonna")
    wait_for(lambda: set(titles(browser)) == {"Frozen", "Music"})


def test_paging_through_results(browser, server: Server, shots: Path) -> None:
    browser.get(server.url + "/?q=padding&size=10")
    first = titles(browser)
    assert len(first) == 10
    before = loads(browser)
    browser.find_element(By.CSS_SELECTOR, "#pager a.next").click()
    wait_for(lambda: loads(browser) > before)
    second = titles(browser)
    expected = [r["title"] for r in server.api(q="padding", size=10, page=2)[1]["results"]]
    assert second == expected and not set(first) & set(second)
    assert "Works 11–20" in browser.find_element(By.ID, "pager").text
    assert "page=2" in browser.current_url
    browser.save_screenshot(str(shots / "page2.png"))


def assert_no_injection(browser: WebDriver) -> None:
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 (reading it is the check)
    images = [i.get_attribute("src") for i in browser.find_elements(By.CSS_SELECTOR, "img")]
    assert all("/cover/" in src for src in images), images  # covers only, no injected one
    scripts = [s.get_attribute("src") for s in browser.find_elements(By.TAG_NAME, "script")]
    assert scripts == [browser.current_url.split("/?")[0].rstrip("/") + "/static/app.js"]
    assert browser.find_elements(By.CSS_SELECTOR, "#results b b") == []  # the <b> tag is text
    text = browser.find_element(By.ID, "results").text
    assert HOSTILE_NAME in text and HOSTILE_TITLE in text and "<b>bold</b> & co" in text


def test_hostile_names_render_as_text(browser, server: Server, shots: Path) -> None:
    browser.get(server.url + "/?q=onerror")  # rendered by the server
    assert_no_injection(browser)
    box = browser.find_element(By.ID, "q")
    box.clear()
    box.send_keys("alert")  # rendered by the script from the API
    wait_for(lambda: loads(browser) >= 1 and browser.current_url.endswith("q=alert"))
    time.sleep(0.3)
    assert_no_injection(browser)
    browser.save_screenshot(str(shots / "hostile.png"))
    assert console_problems(browser) == []


def test_copy_path_button_puts_the_windows_path_on_the_clipboard(browser, server: Server) -> None:
    browser.execute_cdp_cmd(
        "Browser.grantPermissions",
        {"origin": server.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
    )
    browser.get(server.url + "/?q=кино")
    link = browser.find_element(By.CSS_SELECTOR, "#results a.name")
    assert link.text == "Группа крови.mp3"  # the file name links to its stream
    assert "/copy/" in link.get_attribute("href")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#results .unc")) == 1  # the path once
    browser.find_element(By.CSS_SELECTOR, "#results button.copy-path").click()
    wait_for(lambda: browser.find_element(By.ID, "copied").is_displayed())
    unc = "\\\\lab-1\\Музыка\\Кино\\Группа крови.mp3"
    assert browser.find_element(By.ID, "copied").text == f"Copied {unc}"
    pasted = browser.execute_async_script(
        "const done = arguments[0]; navigator.clipboard.readText().then(done, e => done('!' + e))"
    )
    assert pasted == unc
