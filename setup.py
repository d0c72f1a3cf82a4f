"""Only the optional native group encoder lives here; everything else is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and the CommitLog writer
uses its numpy encoder (rocks_timer/record.py).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("rocks_timer._native.groupenc",
                             ["rocks_timer/_native/groupenc.c"],
                             extra_compile_args=["-O2"], optional=True)])
