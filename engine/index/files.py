"""Which files of a corpus folder are read, and a tally of the others by reason.

Skipped by default (as ripgrep and MkDocs users expect):

* **hidden**: a file or folder whose name starts with ``.`` (``.git/``, ``.venv/``, ``.github/``,
  ``.DS_Store``); read them with ``corpus.skip_hidden = false`` (``--hidden``);
* **vendor / build folders**: the folders named in :data:`VENDOR_FOLDERS` (``node_modules``,
  ``_build``, ``build``, ``dist``, ``site``, ``__pycache__``, ``site-packages``, ``.tox``, ...),
  at any depth; read them with ``corpus.skip_vendor = false`` (``--vendor``);
* **unsupported file types**: anything but ``.md`` / ``.markdown`` / ``.rst`` / ``.txt``
  (``conf.py``, images, ``Makefile``);
* **too large**: a file over ``corpus.max_file_mb`` megabytes.

``corpus.include`` / ``corpus.exclude`` (``--include`` / ``--exclude``, repeatable) are glob
patterns with ``.gitignore`` semantics (the pathspec library) on paths relative to the corpus
folder, with ``/`` separators: ``*.md`` matches at any depth, ``/README.md`` only at the top,
``drafts/`` a folder and all under it, ``**`` any number of folders, ``!`` re-includes. With
``include`` a file is read only if some include pattern matches it; a file an ``exclude``
pattern matches is never read. Include patterns do not reach into hidden or vendor folders:
those are not even walked unless their skipping is turned off.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

import pathspec

from spectrag.config import CorpusConfig

TEXT_SUFFIXES = (".md", ".markdown", ".txt", ".rst")

# Folders of installed packages, virtual environments, caches and build outputs; hidden ones
# (.git, .venv, .tox, .mypy_cache, ...) are skipped as hidden already, and listed for when
# skip_hidden is off.
VENDOR_FOLDERS = (
    "node_modules", "bower_components", "vendor", "site-packages", "dist-packages", "__pycache__",
    "venv", ".venv", ".tox", ".nox", ".eggs", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    "_build", "build", "dist", "site", "target", "htmlcov", ".ipynb_checkpoints",
)

# the reasons, in the order the summary lists them
HIDDEN = "hidden"
VENDOR = "vendor/build folder"
EXCLUDED = "excluded by glob"
NOT_INCLUDED = "not matched by an include glob"
UNSUPPORTED = "unsupported file type"
TOO_LARGE = "too large"
SPECIAL = "not a regular file"
UNREADABLE = "unreadable"  # not UTF-8, invalid front matter, a link out of the folder (--skip-invalid)
REASONS = (HIDDEN, VENDOR, EXCLUDED, NOT_INCLUDED, UNSUPPORTED, TOO_LARGE, SPECIAL, UNREADABLE)


def specs(rules: CorpusConfig) -> tuple[pathspec.PathSpec | None, pathspec.PathSpec | None]:
    """The include and exclude patterns compiled (None where there are none)."""
    make = lambda lines: pathspec.GitIgnoreSpec.from_lines(lines) if lines else None  # noqa: E731
    return make(rules.include), make(rules.exclude)


@dataclass
class SkipTally:
    """Files and folders left out of a corpus, by reason: ``counts[reason]`` and the first few
    paths of each (relative, ``/`` separators; a folder ends with ``/``)."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    kinds: dict[str, Counter] = field(default_factory=dict)  # unsupported types: suffix (or name) -> files
    shown: int = 5

    def add(self, reason: str, rel: str, kind: str | None = None) -> None:
        self.counts[reason] += 1
        shown = self.examples.setdefault(reason, [])
        if len(shown) < self.shown:
            shown.append(rel)
        if kind is not None:
            self.kinds.setdefault(reason, Counter())[kind] += 1

    def to_dict(self) -> dict[str, dict]:
        """``{reason: {"count": n, "examples": [...], ("types": {...})}}`` in :data:`REASONS` order."""
        out = {}
        for reason in REASONS:
            if self.counts[reason]:
                entry: dict = {"count": self.counts[reason], "examples": self.examples[reason]}
                if reason in self.kinds:
                    entry["types"] = dict(self.kinds[reason].most_common())
                out[reason] = entry
        return out


def describe(skipped: dict[str, dict], limit: int = 4) -> list[str]:
    """One line per reason of a :meth:`SkipTally.to_dict`: ``unsupported file type: 12 (.py 5, .png 4, ...)``."""
    lines = []
    for reason, entry in skipped.items():
        if "types" in entry:
            items = list(entry["types"].items())
            detail = ", ".join(f"{k} {v:,}" for k, v in items[:limit]) + (", ..." if len(items) > limit else "")
        else:
            detail = ", ".join(entry["examples"][:limit]) + (", ..." if entry["count"] > limit else "")
        lines.append(f"{reason}: {entry['count']:,} ({detail})")
    return lines


def file_kind(name: str) -> str:
    """What the tally of unsupported types counts a file as: its suffix, or its name (``Makefile``)."""
    suffix = os.path.splitext(name)[1].lower()
    return suffix if suffix else name  # Makefile, LICENSE


def _matches(spec: pathspec.PathSpec | None, rel: str) -> bool:
    return spec is not None and spec.match_file(rel)


def prune_folder(name: str, rel: str, rules: CorpusConfig, exclude: pathspec.PathSpec | None) -> str | None:
    """Why the folder ``rel`` (relative, no trailing ``/``) is not walked, or None."""
    if rules.skip_hidden and name.startswith("."):
        return HIDDEN
    if rules.skip_vendor and name in VENDOR_FOLDERS:
        return VENDOR
    if _matches(exclude, rel + "/"):
        return EXCLUDED
    return None


def file_reason(name: str, rel: str, size: int, rules: CorpusConfig, include: pathspec.PathSpec | None,
                exclude: pathspec.PathSpec | None) -> str | None:
    """Why the regular file ``rel`` of ``size`` bytes is not read, or None."""
    if rules.skip_hidden and name.startswith("."):
        return HIDDEN
    if _matches(exclude, rel):
        return EXCLUDED
    if include is not None and not include.match_file(rel):
        return NOT_INCLUDED
    if not name.lower().endswith(TEXT_SUFFIXES):
        return UNSUPPORTED
    if size > rules.max_file_mb * 1e6:
        return TOO_LARGE
    return None
