"""The ``rtimer`` command line: a thin click layer over :mod:`rocks_timer` (DESIGN §12)."""
