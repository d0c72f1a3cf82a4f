"""Take the dashboard screenshot of the docs from a real broker under a real workload.

Starts ``rtimer run --metrics-listen 127.0.0.1:0 --dashboard`` on a fresh data dir, sends
through its socket for ``--seconds`` (batches with delays from 1 s to 2 days, a cancel now and
then, short-delay messages that come due during the run), consumes what is delivered, opens the
page in headless Chromium (Debian's ``chromium`` + ``chromium-driver``, with ``selenium``) and
saves a PNG::

    python -m bench.dashboard_shot --out docs/dashboard.png --seconds 40
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cli.remote import BrokerClient

ROOT = Path(__file__).resolve().parent.parent
_METRICS = re.compile(r"dashboard on (http://127\.0\.0\.1:\d+/)")


def _start(data_dir: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "--data-dir", str(data_dir), "run",
                             "--grpc-listen", "off", "--metrics-listen", "127.0.0.1:0",
                             "--dashboard"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.stdout is not None
    for line in proc.stdout:
        match = _METRICS.search(line)
        if match:
            return proc, match.group(1)
    raise SystemExit("rtimer run ended before serving the dashboard")


def _driver(width: int, height: int):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--hide-scrollbars"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"),
                            options=options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/dashboard.png"))
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--width", type=int, default=1440)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--seed", type=int, default=28)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    data_dir = Path(tempfile.mkdtemp(prefix="rtimer-dashboard-")) / "data"
    proc, url = _start(data_dir)
    driver = None
    try:
        client = BrokerClient.connect(data_dir)
        assert client is not None
        driver = _driver(args.width, args.height)
        driver.get(url + "?interval=1000")
        delays_ms = [1_000, 2_000, 5_000, 30_000, 600_000, 5_400_000, 86_400_000, 172_800_000]
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            phase = 1 + (time.monotonic() % 10) / 10  # sends rise and fall over 10 s
            for _ in range(int(4 * phase)):
                sent = client.call("send", {"topic": rng.choice(["orders", "billing", "audit"]),
                                            "body": "x" * rng.randint(100, 2000),
                                            "delay_ms": rng.choice(delays_ms),
                                            "count": rng.randint(20, 120)})
                if rng.random() < 0.1:
                    client.call("cancel", {"handles": [sent[0]["handle"]]})
            for topic in ("orders", "billing", "audit"):
                client.call("consume", {"topic": topic, "group": "svc", "max_messages": 500})
            time.sleep(0.25)
        # taken under load, after the page's last poll
        args.out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(args.out))
        print(f"wrote {args.out} ({args.width}x{args.height})")
        client.close()
    finally:
        if driver is not None:
            driver.quit()
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(data_dir.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
