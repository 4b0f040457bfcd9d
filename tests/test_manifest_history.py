"""Damaged edit histories (every field of the manifest's ``incremental`` and ``history``: a
wrong type, out of range, missing, an extra key): ``spectrag info`` and ``spectrag delete``
never end in a traceback, and an edit either succeeds or writes nothing (no edit writes and
then fails). The cases are generated from the fields an edited index's manifest holds, so a
new field is covered without a new test."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_incremental import add_supplied, build_supplied, synthetic_docs, write_jsonl

from spectrag.cli.main import main
from spectrag.generations import FOLDER, current_folder, read_pointer
from spectrag.manifest import HISTORY_OPERATIONS
from spectrag.store import MANIFEST


@pytest.fixture(scope="module")
def edited_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hist")
    docs = synthetic_docs(24)
    build_supplied(write_jsonl(root / "a.jsonl", docs[:20]), root / "idx")
    add_supplied(root / "idx", write_jsonl(root / "b.jsonl", docs[20:]))  # history: build, add; incremental set
    return root / "idx"


def _damages(manifest: dict) -> list[tuple[str, object]]:
    """(label, how) for every field: ``how`` is a value, or ``MISSING`` (the key removed)."""
    cases = []
    bad_values = {"wrong type": lambda v: "x" if not isinstance(v, str) else 7, "negative": lambda v: -1e9,
                  "list": lambda v: [1], "null": lambda v: None, "huge": lambda v: 10**30, "bool": lambda v: True}
    for key, value in manifest["incremental"].items():
        for label, make in bad_values.items():
            cases.append((f"incremental.{key}={label}", ("incremental", key, make(value))))
        cases.append((f"incremental.{key} missing", ("incremental", key, MISSING)))
    for i, entry in enumerate(manifest["history"]):
        for key, value in entry.items():
            for label, make in bad_values.items():
                cases.append((f"history[{i}].{key}={label}", (i, key, make(value))))
            cases.append((f"history[{i}].{key} missing", (i, key, MISSING)))
        cases.append((f"history[{i}] extra", (i, "zz_extra", {"nested": [1, 2]})))
        cases.append((f"history[{i}] not a table", (i, None, "abc")))
    cases.append(("incremental extra", ("incremental", "zz_extra", 5)))
    cases += [(f"incremental={v!r}", ("incremental", None, v)) for v in ("abc", 3, [1])]
    cases += [(f"history={v!r}", ("history", None, v)) for v in ("abc", [], {"op": "build"})]
    cases.append(("history[0].op unknown", (0, "op", "rebuild")))
    return cases


MISSING = object()


def _damage(manifest: dict, where, key, value) -> dict:
    m = json.loads(json.dumps(manifest))
    if where in ("incremental", "history") and key is None:
        m[where] = value
        return m
    table = m["incremental"] if where == "incremental" else m["history"]
    if key is None:
        table[where] = value
        return m
    target = table if where == "incremental" else table[where]
    if value is MISSING:
        target.pop(key, None)
    else:
        target[key] = value
    return m


def _state(root: Path) -> tuple:
    return read_pointer(root), sorted(p.name for p in (root / FOLDER).iterdir())


def test_every_damaged_history_field_is_refused_or_harmless(edited_root, tmp_path):
    base = json.loads((current_folder(edited_root) / MANIFEST).read_text())
    assert set(base["incremental"]) >= {"since", "operations", "changed_chunks", "spectrum"}
    assert [e["op"] for e in base["history"]] == ["build", "add"] and set(HISTORY_OPERATIONS) >= {"build", "add"}
    runner = CliRunner()
    cases = _damages(base)
    assert len(cases) > 100
    outcomes = {"refused": 0, "accepted": 0}
    for n, (label, (where, key, value)) in enumerate(cases):
        root = tmp_path / f"c{n}"
        shutil.copytree(edited_root, root)
        (current_folder(root) / MANIFEST).write_text(json.dumps(_damage(base, where, key, value)))
        info = runner.invoke(main, ["info", str(root), "--no-verify"])
        assert not isinstance(info.exception, Exception) or isinstance(info.exception, SystemExit), (label, info.output)
        assert "Traceback" not in info.output, (label, info.output)
        before = _state(root)
        edit = runner.invoke(main, ["delete", str(root), "doc003"])
        assert isinstance(edit.exception, (SystemExit, type(None))), (label, edit.output, edit.exc_info)
        assert "Traceback" not in edit.output, (label, edit.output)
        if edit.exit_code == 0:
            outcomes["accepted"] += 1
            assert _state(root) != before, label  # it wrote, and it succeeded
        else:
            outcomes["refused"] += 1
            assert info.exit_code != 0, (label, "info accepted what the edit refused", edit.output)
            assert "manifest field" in edit.output or "manifest has" in edit.output, (label, edit.output)
            assert _state(root) == before, (label, "an edit that failed wrote")  # nothing written
        if label == "incremental.changed_chunks=negative":
            assert edit.exit_code != 0 and "incremental.changed_chunks must be an integer >= 0" in edit.output
        if label == "history[0].documents=wrong type":
            assert edit.exit_code != 0 and "history[0].documents" in edit.output
    print(f"damaged manifests: {len(cases)} cases x (info, delete): {outcomes['refused']} refused with a named field, "
          f"{outcomes['accepted']} accepted and edited, 0 tracebacks, 0 edits that wrote and failed")
    assert outcomes["refused"] > 50 and outcomes["accepted"] > 0, outcomes  # extra keys are kept, bad values refused
