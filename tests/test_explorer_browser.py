"""`primus explore` in headless Chromium over a real two-source run: cost totals, a source filter, the waterfall, errors."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from primus.explorer.server import ExplorerServer, make_server, serve_in_thread
from primus.explorer.store import RunStore
from primus.tools.cluster import ClusterState
from tests.stores import REQUIRE_ENV
from tests.test_explorer import run_job, two_source_job
from tests.tiers import Tier, uses

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DRIVERS = ("chromedriver", "/usr/lib/chromium/chromedriver")
WAIT_SECONDS = 30.0
T = TypeVar("T")


def _missing(reason: str) -> None:
    """Skip on a machine without a browser; fail where CI requires every test to run."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason}; CI requires the browser test to run ({REQUIRE_ENV}=1)")
    pytest.skip(f"{reason}; install it to run this test (Debian: apt-get install -y chromium chromium-driver; pip install selenium)")


def _which(names: tuple[str, ...]) -> str | None:
    for name in names:
        found = shutil.which(name) or (name if os.path.isabs(name) and os.access(name, os.X_OK) else None)
        if found:
            return found
    return None


@pytest.fixture
@uses(Tier.LIVE)
def chrome() -> Iterator[Any]:
    """A headless Chromium through chromedriver, both found on this machine (nothing is downloaded)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed")
    binary, driver_path = _which(BROWSERS), _which(DRIVERS)
    if binary is None:
        _missing(f"no Chromium on PATH (looked for {', '.join(BROWSERS)})")
    if driver_path is None:
        _missing("no chromedriver on PATH")
    options = Options()
    options.binary_location = str(binary)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage", "--window-size=1400,2000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(driver_path)))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def explorer(tmp_path: Path) -> Iterator[ExplorerServer]:
    server = make_server(RunStore(tmp_path / "runs"), "127.0.0.1", 0)
    serve_in_thread(server)
    yield server
    server.shutdown()
    server.server_close()


def _until(what: str, check: Callable[[], T | bool | None]) -> T:
    """Poll the page until check gives something truthy; fail naming what was awaited."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    deadline = time.monotonic() + WAIT_SECONDS
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except (StaleElementReferenceException, WebDriverException) as exc:  # the page redrew under us
            value, last = None, exc
        if value:
            return value  # type: ignore[return-value]
        time.sleep(0.1)
    raise AssertionError(f"the page did not show {what} within {WAIT_SECONDS:.0f} s (last error: {last})")


def _artifacts() -> Path:
    folder = Path(os.environ.get("PRIMUS_ARTIFACTS") or "/tmp/primus-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _totals(driver: Any) -> dict[str, float]:
    from selenium.webdriver.common.by import By

    row = driver.find_element(By.ID, "cost-total")
    return {key: float(row.get_attribute(f"data-{key}")) for key in ("samples", "bytes", "cpu", "retries", "wasted-samples")}


def test_the_job_page_in_a_browser(chrome: Any, cluster: ClusterState, dataset: Path, explorer: ExplorerServer) -> None:
    from selenium.webdriver.common.by import By

    job_id, report = run_job(cluster, two_source_job(dataset))
    assert report["state"] == "SUCCEEDED"
    ledger = {s["source"]: s for s in report["sources"]}
    assert sorted(ledger) == ["a", "b"]
    driver = chrome
    try:
        driver.get(explorer.url + "#/jobs")
        link = _until("the job in the jobs list", lambda: driver.find_elements(By.CSS_SELECTOR, f'#jobs tr[data-job="{job_id}"] a'))
        link[0].click()
        _until("the cost table", lambda: driver.find_elements(By.ID, "cost-total"))
        assert driver.current_url.endswith(f"#/jobs/{job_id}")
        totals = _totals(driver)
        assert totals["samples"] == sum(s["samples"] for s in ledger.values())
        assert totals["bytes"] == sum(s["bytes_read"] for s in ledger.values())
        assert totals["retries"] == sum(s["retries"] for s in ledger.values())
        assert totals["wasted-samples"] == sum(s["wasted_samples"] for s in ledger.values())
        assert totals["cpu"] == pytest.approx(sum(s["cpu_seconds"] for s in ledger.values()))
        shown = driver.find_element(By.ID, "cost-total").find_elements(By.TAG_NAME, "td")
        assert shown[1].text == f"{sum(s['samples'] for s in ledger.values()):,}", "the page prints the report's total"
        assert driver.find_element(By.ID, "cost-sources").get_attribute("data-basis") == "report"

        rows = _until("the waterfall", lambda: driver.find_elements(By.CSS_SELECTOR, "#waterfall .wf-row"))
        services = {row.get_attribute("data-service") for row in rows}
        assert len(services) >= 4, f"the waterfall shows spans of {sorted(services)}"
        assert {"master", "planner", "data_executor", "trainer"} <= services
        driver.execute_script("window.scrollTo(0, 0)")
        driver.save_screenshot(str(_artifacts() / "explorer-job.png"))
        read = next(row for row in rows if "data_task.read" in row.text)
        read.click()
        _until("a span's attributes", lambda: "primus.task_id" in driver.find_element(By.ID, "span-detail").text)
        assert "span=" in driver.current_url, "the chosen span is in the URL"
        _until("the task graph", lambda: driver.find_elements(By.CSS_SELECTOR, "#graph rect.cell"))
        assert driver.find_elements(By.CSS_SELECTOR, "#graph path.edge"), "b's tasks wait for a's of the same slot: edges drawn"
        assert driver.find_elements(By.CSS_SELECTOR, "#tasks tbody tr")
        assert driver.find_elements(By.CSS_SELECTOR, "#cost-chart rect.bar") and driver.find_elements(By.CSS_SELECTOR, "#timeline polyline")
        driver.save_screenshot(str(_artifacts() / "explorer-span.png"))

        checkbox = driver.find_element(By.CSS_SELECTOR, 'input[name="source"][value="b"]')
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", checkbox)
        checkbox.click()
        _until("the totals of source b alone", lambda: "source=b" in driver.current_url and _totals(driver)["samples"] == ledger["b"]["samples"])
        totals = _totals(driver)
        assert totals["bytes"] == ledger["b"]["bytes_read"] and totals["cpu"] == pytest.approx(ledger["b"]["cpu_seconds"])
        sources = [row.get_attribute("data-source") for row in driver.find_elements(By.CSS_SELECTOR, "#cost-sources tbody tr")]
        assert sources == ["b"]
        assert {row.get_attribute("data-source") for row in driver.find_elements(By.CSS_SELECTOR, "#tasks tbody tr")} == {"b"}
        driver.save_screenshot(str(_artifacts() / "explorer-job-source-b.png"))

        shared = driver.current_url  # a link to this view shows the same
        driver.get("about:blank")
        driver.get(shared)
        _until("the shared view", lambda: driver.find_elements(By.ID, "cost-total") and _totals(driver)["samples"] == ledger["b"]["samples"])
        assert driver.find_element(By.CSS_SELECTOR, 'input[name="source"][value="b"]').is_selected()

        driver.get(explorer.url + "#/jobs/no-such-job")
        error = _until("the error for an unknown job", lambda: driver.find_element(By.ID, "error").is_displayed() and driver.find_element(By.ID, "error"))
        assert "no job 'no-such-job'" in error.text and job_id in error.text
        driver.get(explorer.url + f"#/jobs/{job_id}?from=later")
        _until("the error for a bad filter", lambda: "from='later'" in driver.find_element(By.ID, "cost").text)
        severe = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE" and "status of 4" not in entry["message"]]
        assert not severe, f"the page logged errors: {severe}"
    finally:
        driver.save_screenshot(str(_artifacts() / "explorer-last.png"))
