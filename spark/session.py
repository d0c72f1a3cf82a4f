"""One place that builds the SparkSession every job and test uses (quiet, small, local).

Workers must run this interpreter (the venv's): Spark reads ``PYSPARK_PYTHON`` from the
environment when the session starts and ignores the builder's ``spark.pyspark.python``, so it is
set here before the session exists.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable


def build_session(master: str = "local[*]", app_name: str = "rocks-timer",
                  shuffle_partitions: int = 2):
    """A SparkSession on ``master`` with the UI, console progress and INFO logging off."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.default.parallelism", "2")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.execution.pythonUDF.arrow.enabled", "false")
               .config("spark.log.level", "ERROR"))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def run_job(master: str, app_name: str, job: Callable[[Any], dict[str, Path]],
            show: str | None = None) -> int:
    """A command-line job's life: start a session, run ``job(spark)``, stop the session, then
    print the markdown output named ``show`` and the paths written. Returns the exit status."""
    spark = build_session(master, app_name=app_name)
    try:
        paths = job(spark)
    finally:
        spark.stop()
    if show is not None:
        print(paths[show].read_text(encoding="utf-8"))
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


__all__ = ["build_session", "run_job"]
