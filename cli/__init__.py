"""The ``rtimer`` command line: a thin click layer over :mod:`rocks_timer` (docs/CLI.md)."""
