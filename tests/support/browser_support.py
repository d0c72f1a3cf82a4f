"""Headless Chromium through Selenium, driving Debian's ``chromium`` and ``chromium-driver``
(``make browser`` installs them as root). Missing: a skip that says why, or a failure under
CI=true (STYLE habit 13)."""
from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


def _missing(what: str) -> None:
    reason = (f"{what} is missing: `make browser` installs Debian's chromium and "
              "chromium-driver (as root) and the dev extra installs selenium")
    if os.environ.get("CI") == "true":
        pytest.fail(reason + " (CI=true: a missing tool fails)")
    pytest.skip(reason)


def headless_chromium(width: int = 1440, height: int = 900):
    """A started Chrome driver on a headless Chromium (quit it when done)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("the selenium package")
    binary = next((found for name in CHROMIUM if (found := shutil.which(name))), None)
    driver_path = shutil.which("chromedriver")
    if binary is None:
        _missing("chromium")
    if driver_path is None:
        _missing("chromedriver (chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--hide-scrollbars"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=options)
