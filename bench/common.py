"""Small helpers shared by the benchmarks: result files, scratch dirs on a real disk, timing."""
from __future__ import annotations

import gc
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    return {"python": platform.python_version(), "cpus": os.cpu_count(),
            "platform": platform.platform()}


def write_result(name: str, payload: dict, directory: Path | None = None) -> Path:
    directory = directory or RESULTS
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    payload = {"benchmark": name, "machine": machine(),
               "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **payload}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


@contextmanager
def settled_gc():
    """Collect, then freeze what exists for the duration: the prepared inputs are not part of
    what is timed, so the collector should not walk them during the run (the same for every
    variant of a benchmark). Unfrozen afterwards, so they can be collected again."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def is_tmpfs(path: Path) -> bool:
    best, fstype = "", ""
    for line in Path("/proc/mounts").read_text().splitlines():
        _dev, mount, kind, *_ = line.split()
        if str(path.resolve()).startswith(mount) and len(mount) > len(best):
            best, fstype = mount, kind
    return fstype in ("tmpfs", "ramfs")


@contextmanager
def scratch_dir(base: Path | None = None, prefix: str = "bench-"):
    """A fresh directory on a real disk (never tmpfs), removed afterwards."""
    base = base or RESULTS / "tmp"
    base.mkdir(parents=True, exist_ok=True)
    if is_tmpfs(base):
        raise RuntimeError(f"{base} is on tmpfs; benchmarks must write to a real disk")
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def markdown_table(head: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a Markdown table (the form docs/BENCHMARKS.md quotes): a header, its rule and
    one line per row of already formatted cells."""
    return ["| " + " | ".join(cells) + " |" for cells in (head, ["---"] * len(head), *rows)]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q / 100 * (len(ordered) - 1)))))
    return ordered[index]


def median(values: list[float]) -> float:
    return statistics.median(values)


def io_write_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM). Unlike ``ru_maxrss``, which Linux carries over
    ``execve`` from the parent, VmHWM starts afresh in a new program."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def process_cpu_s(pid: int) -> float:
    """CPU time (user + system, all threads) that process ``pid`` has used, from
    /proc/<pid>/stat. The command name may hold spaces: fields are counted after its ')'."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3 of proc(5)); utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ProcessCpu:
    """CPU seconds of named processes, read together: ``read()`` -> {name: seconds}. The name
    ``self`` is this process (``time.process_time``: every thread)."""

    def __init__(self, pids: dict[str, int]):
        self.pids = dict(pids)

    def read(self) -> dict[str, float]:
        return {name: time.process_time() if pid == os.getpid() else process_cpu_s(pid)
                for name, pid in self.pids.items()}

    @staticmethod
    def ms_per(before: dict[str, float], after: dict[str, float], count: int) -> dict[str, float]:
        """Milliseconds of CPU per item between two readings (each process apart)."""
        return {name: round((after[name] - before[name]) * 1000 / count, 3) if count else None
                for name in before}


def import_client(home: Path):
    """The official RocketMQ 5 Python client, imported with HOME pointing at ``home`` (it
    creates ~/logs/rocketmq_python on import) and told its address is loopback (it would
    otherwise look it up). Every benchmark that drives the client imports it through here."""
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:
        import rocketmq
        from rocketmq.v5.util.misc import Misc
    finally:
        if saved is not None:
            os.environ["HOME"] = saved
    Misc._Misc__LOCAL_IP = "127.0.0.1"
    return rocketmq
