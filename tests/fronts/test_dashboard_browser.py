"""The dashboard in a real headless Chromium against a real ``rtimer run``: it loads with no
console error, shows the pending count and the due histogram equal to ``stats()``, and follows
more sends live."""
from __future__ import annotations

import time

import pytest

from tests.support.browser_support import headless_chromium
from tests.support.metrics_support import MetricsBroker


def _shown(driver) -> dict:
    """What the page shows: the pending count, the due table and the due chart's bars, read in
    one script run (the page redraws them every poll, between two WebDriver calls)."""
    return driver.execute_script("""
        const table = {}, bars = {};
        for (const cell of document.querySelectorAll("#due-table td[data-bucket]"))
          table[cell.dataset.bucket] = Number(cell.textContent.replace(/,/g, ""));
        for (const bar of document.querySelectorAll("#due-chart rect"))
          bars[bar.getAttribute("data-label")] = Number(bar.getAttribute("data-value"));
        return {pending: document.getElementById("pending").textContent, table, bars};""")


def _wait_until_shown(driver, broker: MetricsBroker, timeout_s: float = 20.0) -> dict:
    """Poll until the page shows what ``stats()`` says (the page polls every 200 ms)."""
    deadline = time.monotonic() + timeout_s
    while True:
        stats = broker.stats()
        shown = _shown(driver)
        expected = {"pending": f"{stats['pending']:,}", "table": stats["due"]["buckets"],
                    "bars": stats["due"]["buckets"]}
        if shown == expected:
            return stats
        if time.monotonic() > deadline:
            raise AssertionError(f"the page shows {shown}, stats() says {expected}")
        time.sleep(0.1)


def _text(driver, element_id: str) -> str:
    return driver.execute_script("return document.getElementById(arguments[0]).textContent",
                                 element_id)


def _console_errors(driver) -> list:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def test_dashboard_shows_stats_live_without_console_errors(tmp_path):
    driver = headless_chromium()
    broker = MetricsBroker(tmp_path / "data").start()
    try:
        broker.cli("send", "orders", "soon", "--delay", "200ms", "--count", "2")
        broker.cli("send", "orders", "later", "--delay", "2h", "--count", "5")
        broker.cli("send", "billing", "in two days", "--delay", "2d", "--count", "3")
        broker.wait_for(lambda s: s["delivered"] == 2 and s["in_flight"] == 0, "2 deliveries")
        driver.get(broker.url + "/?interval=200")
        stats = _wait_until_shown(driver, broker)
        assert stats["pending"] == 8
        assert stats["due"]["buckets"]["hour"] == 0 and stats["due"]["buckets"]["day"] == 5
        assert _text(driver, "health") == "healthy"
        assert _text(driver, "early") == "0"
        assert _text(driver, "engine") == "engine rocksdb (vlog)"
        polls = int(driver.execute_script("return document.body.dataset.polls"))

        broker.cli("send", "orders", "more", "--delay", "30m", "--count", "4")
        stats = _wait_until_shown(driver, broker)
        assert stats["pending"] == 12 and stats["due"]["buckets"]["hour"] == 4
        assert int(driver.execute_script("return document.body.dataset.polls")) > polls
        assert _console_errors(driver) == []
        shot = tmp_path / "dashboard.png"
        assert driver.save_screenshot(str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        driver.quit()
        broker.stop()


def test_a_page_error_would_be_seen(tmp_path):
    """The console check can fail: a script error on the same page is reported as SEVERE."""
    driver = headless_chromium()
    broker = MetricsBroker(tmp_path / "data").start()
    try:
        driver.get(broker.url + "/?interval=200")
        driver.execute_script("setTimeout(function () { undefinedFunction(); }, 0);")
        deadline = time.monotonic() + 10
        errors = []
        while not errors and time.monotonic() < deadline:
            errors = _console_errors(driver)
            time.sleep(0.05)
        assert errors and "undefinedFunction" in errors[0]["message"]
    finally:
        driver.quit()
        broker.stop()
