"""ConsumeQueue appends, one file at a time or across file boundaries: every entry lands at its
offset and every file but the last is full (the append's one-file fast path and its general
path write the same files)."""
from __future__ import annotations

import os

import pytest

from rocks_timer.consumequeue import ENTRY_SIZE, ConsumeQueue


@pytest.mark.parametrize("run", [1, 2, 3, 4, 5, 9])
def test_appends_of_any_run_land_at_their_offsets_across_files(tmp_path, run):
    queue = ConsumeQueue(tmp_path / "q", "T", 0, 4)
    entries = [(i * 100, 10 + i, 1000 + i) for i in range(23)]
    for at in range(0, len(entries), run):
        queue.append(entries[at:at + run], at)
    assert queue.max_offset == len(entries)
    assert [(e.commitlog_offset, e.size, e.tags_code) for e in queue.entries(0, 30)] == entries
    sizes = [os.path.getsize(tmp_path / "q" / name) for name in sorted(os.listdir(tmp_path / "q"))]
    assert sizes == [4 * ENTRY_SIZE] * 5 + [3 * ENTRY_SIZE]
    assert queue.bytes_written == len(entries) * ENTRY_SIZE
