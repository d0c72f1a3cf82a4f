"""What the distribution installs, and the optional native extension; the rest is in pyproject.toml.

Packages: the library (``rocks_timer``, and ``legacy_levels``, which the Broker runs for delay
levels) and the ``rtimer`` command, whose folder ``cli/`` installs under the project's own name
``rocks_timer_cli`` so that no package named plainly ``cli`` lands in site-packages. ``bench/``
and ``spark/`` are tools of the checkout and are never installed (docs/DECISIONS.md "Packaging").

``optional=True``: without a C compiler the install still succeeds and every hot path uses its
pure-Python reference (rocks_timer/batch_encoder.py, fileio.py, timer/schedule_codec.py,
timer/rocksdb/segments.py).

``rocks_timer._native.h2``, the gRPC front's HTTP/2 codec over libnghttp2, is a module of its own,
built only where nghttp2's header is installed (Debian ``libnghttp2-dev``; ``make venv`` installs
it as root): elsewhere the install succeeds without it and the gRPC front serves through grpcio
(rocks_timer/proxy/server.py logs which one runs).
"""
import sysconfig
from pathlib import Path

from setuptools import Extension, find_packages, setup

NATIVE = Path("rocks_timer/_native")


# A plain loop: setuptools runs this file through exec with its own locals, where a function or a
# generator expression would not see the names imported above.
HAS_NGHTTP2 = False
for include in (sysconfig.get_config_var("INCLUDEDIR") or "/usr/include", "/usr/include",
                "/usr/local/include"):
    HAS_NGHTTP2 = HAS_NGHTTP2 or Path(include, "nghttp2", "nghttp2.h").exists()
HTTP2 = [Extension("rocks_timer._native.h2", sources=[str(NATIVE / "h2.c")],
                   libraries=["nghttp2"], extra_compile_args=["-O2"], optional=True)]

setup(packages=find_packages(include=["rocks_timer", "rocks_timer.*",
                                      "legacy_levels", "legacy_levels.*"]) + ["rocks_timer_cli"],
      package_dir={"rocks_timer_cli": "cli"},
      ext_modules=[Extension("rocks_timer._native.codec",
                             sources=[str(NATIVE / name) for name in
                                      ("module.c", "fields.c", "commitlog.c", "timer.c", "vlog.c",
                                       "delivery.c", "routing.c",
                                       "claim.c", "tally.c", "consume.c", "client_records.c",
                                       "remoting.c")],
                             depends=[str(NATIVE / "native.h")],
                             extra_compile_args=["-O2"], optional=True)]
      + (HTTP2 if HAS_NGHTTP2 else []))
