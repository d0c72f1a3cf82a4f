"""Only the optional native extension lives here; everything else is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and every hot path uses its
pure-Python reference (rocks_timer/batch_encoder.py, fileio.py, timer/schedule_codec.py,
timer/rocksdb/segments.py).
"""
from pathlib import Path

from setuptools import Extension, setup

NATIVE = Path("rocks_timer/_native")

setup(ext_modules=[Extension("rocks_timer._native.codec",
                             sources=[str(NATIVE / name) for name in
                                      ("module.c", "fields.c", "commitlog.c", "timer.c", "vlog.c",
                                       "delivery.c", "routing.c",
                                       "claim.c", "tally.c")],
                             depends=[str(NATIVE / "native.h")],
                             extra_compile_args=["-O2"], optional=True)])
