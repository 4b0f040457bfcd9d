"""Document ids that cannot drift: the ids of a folder corpus are paths relative to the folder
the index was built from (its source root, recorded as ``source.root`` in the manifest), so an
edit given a subfolder or a file of that root maps its paths to the root.

``spectrag update idx corpus/click`` on an index built from ``corpus/`` therefore replaces
``click/x.md``, not adds ``x.md``. A folder outside the root keeps ids relative to itself (a
copy of part of the corpus, or new documents to add); an update from there whose ids match
none of the index's is refused, naming both folders: it would add every document again under
new ids. An index written before the root was recorded has only the path it was built from as
given; when that is absolute it is the root, else ids are not mapped.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from spectrag.errors import CorpusError
from spectrag.types import Document


def source_root(manifest: dict[str, Any]) -> Path | None:
    """The folder the index's ids are relative to, when it was built from a folder and that is
    known (None: a file corpus, or an older index built from a relative path)."""
    source = manifest.get("source") or {}
    if source.get("format") != "folder":
        return None
    root = source.get("root")
    if isinstance(root, str) and root:
        return Path(root)
    path = Path(source.get("path", ""))
    return path if path.is_absolute() and path.is_dir() else None


def id_prefix(manifest: dict[str, Any], source: Path, fmt: str) -> tuple[str, Path | None]:
    """``(prefix, root)``: what the ids read from the folder corpus ``source`` get in front
    (``"click/"`` for a subfolder ``click`` of the root; ``""`` for the root itself, a folder
    elsewhere or a file corpus) and the root (None when unknown or not a folder corpus)."""
    root = source_root(manifest)
    if root is None or fmt != "folder":
        return "", root
    here = Path(source).resolve()
    base = here.parent if here.is_file() else here  # a single file's id is its name
    try:
        rel = base.relative_to(root.resolve())
    except ValueError:
        return "", root
    return ("" if rel == Path(".") else rel.as_posix() + "/"), root


def map_ids(docs: list[Document], prefix: str) -> list[Document]:
    """``docs`` with ``prefix`` in front of each id."""
    return [replace(d, doc_id=prefix + d.doc_id) for d in docs] if prefix else docs


def refuse_foreign_update(docs: list[Document], present: set[str], source: Path, root: Path | None,
                          prefix: str, index_dir: Path) -> None:
    """An update from a folder outside the index's source root whose ids match none of the
    index's: a :class:`CorpusError` naming both (it would duplicate the documents)."""
    if root is None or prefix or not docs or any(d.doc_id in present for d in docs):
        return
    try:
        Path(source).resolve().relative_to(root.resolve())
        return  # the root itself: its new documents are new
    except ValueError:
        pass
    raise CorpusError(
        f"{source} is not under {root}, the folder {index_dir} was built from, and none of its {len(docs)} "
        f"document ids (e.g. {docs[0].doc_id!r}) is in the index: ids are paths relative to {root}, so this "
        f"update would add them all as new documents. Pass {root} or a folder or file under it "
        "(or use `spectrag add` for new documents)")
