"""What the distribution installs, and the optional native extension; the rest is in pyproject.toml.

Packages: the library (``rocks_timer``, and ``legacy_levels``, which the Broker runs for delay
levels) and the ``rtimer`` command, whose folder ``cli/`` installs under the project's own name
``rocks_timer_cli`` so that no package named plainly ``cli`` lands in site-packages. ``bench/``
and ``spark/`` are tools of the checkout and are never installed (docs/DECISIONS.md "Packaging").

``optional=True``: without a C compiler the install still succeeds and every hot path uses its
pure-Python reference (rocks_timer/batch_encoder.py, fileio.py, timer/schedule_codec.py,
timer/rocksdb/segments.py).
"""
from pathlib import Path

from setuptools import Extension, find_packages, setup

NATIVE = Path("rocks_timer/_native")

setup(packages=find_packages(include=["rocks_timer", "rocks_timer.*",
                                      "legacy_levels", "legacy_levels.*"]) + ["rocks_timer_cli"],
      package_dir={"rocks_timer_cli": "cli"},
      ext_modules=[Extension("rocks_timer._native.codec",
                             sources=[str(NATIVE / name) for name in
                                      ("module.c", "fields.c", "commitlog.c", "timer.c", "vlog.c",
                                       "delivery.c", "routing.c",
                                       "claim.c", "tally.c", "consume.c", "client_records.c")],
                             depends=[str(NATIVE / "native.h")],
                             extra_compile_args=["-O2"], optional=True)])
