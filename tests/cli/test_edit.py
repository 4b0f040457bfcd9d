"""What `spectrag add | delete | update` print: counts with their grammar, an update reported as an
update (not an add plus a delete), and the history line of an edit alike."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spectrag.cli.edit import edit_line
from spectrag.incremental.history import _change


def _index(**report):
    fields = dict(operation="update", documents=0, documents_replaced=0, documents_removed=0, documents_unchanged=0,
                  chunks=0, chunks_removed=0, compacted=False, spectrum=None, seconds={"all": 1.0})
    return SimpleNamespace(report=SimpleNamespace(**{**fields, **report}))


@pytest.mark.parametrize("report, expected", [
    (dict(operation="delete", documents_removed=1, chunks_removed=1), "delete: deleted 1 document (0 chunks added, 1 removed)"),
    (dict(operation="update", documents=1, documents_replaced=1, documents_removed=1, chunks=2, chunks_removed=1,
          documents_unchanged=1), "update: updated 1 document (2 chunks added, 1 removed), 1 document unchanged"),
    (dict(operation="add", documents=3, chunks=1), "add: added 3 documents (1 chunk added, 0 removed)"),
    (dict(operation="update", documents_unchanged=2), "update: 2 documents unchanged"),
])
def test_edit_lines_count_with_grammar_and_updates_as_updates(report, expected):
    line = edit_line(_index(**report))
    assert line.startswith(expected) and line.endswith(" in 1.00 s")


def test_the_history_reports_an_update_as_an_update():
    entry = {"op": "update", "documents_added": 1, "chunks_added": 2, "documents_removed": 1, "chunks_removed": 1,
             "documents_replaced": 1, "documents_unchanged": 4}
    assert _change(entry) == "1 updated (+2 / -1 chunks), 4 unchanged"
    entry = {"op": "add", "documents_added": 2, "chunks_added": 3}
    assert _change(entry) == "+2 documents (+3 / -0 chunks)"
