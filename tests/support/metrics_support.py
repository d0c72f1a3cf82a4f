"""Helpers of the metrics tests: ``rtimer run --metrics-listen 127.0.0.1:0`` in a real
subprocess, the CLI against it, and a parsed scrape."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.run_support import wait_listening

ROOT = Path(__file__).resolve().parents[2]
_METRICS = re.compile(r"metrics on http://(127\.0\.0\.1:\d+)/metrics")
NODE_LABELS = ("cluster", "node_type", "node_id")


class MetricsBroker:
    """One ``rtimer run`` with metrics (and the dashboard) on a free port; no gRPC front
    unless asked for."""

    def __init__(self, data_dir: Path, *run_args: str):
        self.data_dir = Path(data_dir)
        self.run_args = run_args or ("--grpc-listen", "off")
        self.proc: subprocess.Popen | None = None
        self.address = ""
        self.output: list[str] = []

    def start(self) -> "MetricsBroker":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "--data-dir", str(self.data_dir), "run",
             "--remoting-listen", "off", "--metrics-listen", "127.0.0.1:0", "--dashboard",
             *self.run_args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)))
        self.address = wait_listening(self.proc, _METRICS, self.output).group(1)
        return self

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def get(self, path: str) -> tuple[int, str, bytes]:
        with urllib.request.urlopen(self.url + path, timeout=30) as reply:
            return reply.status, reply.headers.get("Content-Type", ""), reply.read()

    def scrape(self) -> str:
        return self.get("/metrics")[2].decode()

    def cli(self, *args: str, check: bool = True) -> str:
        done = subprocess.run([sys.executable, "-m", "cli.main", "--data-dir",
                               str(self.data_dir), *args], capture_output=True, text=True,
                              cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def cli_json(self, *args: str):
        return json.loads(self.cli(*args, "--json"))

    def stats(self) -> dict:
        return self.cli_json("stats")

    def wait_for(self, predicate, what: str, timeout_s: float = 30.0) -> dict:
        """Poll ``stats`` until ``predicate(stats)``; the broker delivers on its own clock."""
        deadline = time.monotonic() + timeout_s
        while True:
            stats = self.stats()
            if predicate(stats):
                return stats
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not happen: {stats}")
            time.sleep(0.1)

    def stop(self) -> str:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            rest, _ = self.proc.communicate(timeout=60)
            self.output.append(rest or "")
        return "".join(self.output)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels without the node labels): value} of a scrape, checking
    that every sample carries the node labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for label in NODE_LABELS:
                assert label in sample.labels, (sample.name, label)
            labels = tuple(sorted((k, v) for k, v in sample.labels.items()
                                  if k not in NODE_LABELS))
            found[(sample.name, labels)] = sample.value
    return found


def value(found: dict, name: str, **labels: str) -> float:
    """The one sample ``name`` whose labels include ``labels``."""
    hits = [v for (n, ls), v in found.items()
            if n == name and set(labels.items()) <= set(ls)]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def series(found: dict, name: str, label: str) -> dict[str, float]:
    """{value of ``label``: sample value} of every sample ``name``."""
    return {dict(ls)[label]: v for (n, ls), v in found.items() if n == name}
