"""Generations: an index folder that readers can trust while it is edited.

Layout::

    DIR/CURRENT               the id of the current generation ("7"), one line
    DIR/generations/7/        a complete index (manifest.json and every file it lists), never
                              changed once CURRENT has named it
    DIR/generations/6/        an older one, kept while a reader holds it

A writer (build over an existing index, add, delete, update, compact) holds the index lock
(:func:`spectrag.store.index_lock`), writes a new generation folder beside the current one
(unchanged files hard-linked from it, :func:`link_file`), syncs it, and as its very last step
replaces CURRENT (write a temporary file, fsync, ``os.replace``: the file system's atomic
rename, then fsync the folder). A reader resolves CURRENT once (:func:`resolve`) and reads only
that generation, so it sees the old or the new index, never a mix.

Who may remove an old generation: each reader holds a shared ``fcntl.flock`` on its generation's
folder for as long as it keeps the index (the lock goes when the :class:`Generation` is released
or its process ends, however it ends); a writer removes a generation other than the current one
only when it gets a non-blocking exclusive lock on it (:func:`collect`). Our own lock rather than
a reference count or a grace period: the kernel drops a dead reader's flock, so nothing can be
left counted, and a reader that keeps an index for hours keeps its files for hours. A writer
killed at any point leaves at most one generation CURRENT does not name, removed by the next
write (which calls :func:`collect` first).

A folder with ``manifest.json`` and no CURRENT (the layout before generations) is read as
generation ``0``; the first write into it adds ``generations/1`` and CURRENT, and removes the
old top-level files once no reader holds the folder.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from spectrag.errors import IndexFormatError

try:  # POSIX; elsewhere no reader holds a lock and collect() keeps the previous generation
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

POINTER = "CURRENT"
FOLDER = "generations"
FLAT = "0"  # the id of an index written before generations (its files at the top of the folder)
MANIFEST = "manifest.json"

# what an index written before generations holds at its top (other names there are left alone)
_FLAT_NAMES = ("chunks.jsonl", "embeddings.npy", "dense.faiss", "bm25", "graph", "kg", "llm")
_ID = re.compile(r"[1-9][0-9]{0,17}")
_RETRIES = 200  # each retry means a writer moved CURRENT on between two steps of a resolve


def _kill_point(name: str) -> None:
    """Testing hook: ``SPECTRAG_KILL_AT=name`` ends the process here as a kill -9 would."""
    if os.environ.get("SPECTRAG_KILL_AT") == name:
        os._exit(137)


def read_pointer(root: str | Path) -> str | None:
    """The generation id CURRENT names, or None when the folder has no CURRENT (the flat layout
    or no index). A CURRENT that does not hold an id is an :class:`IndexFormatError`."""
    path = Path(root) / POINTER
    try:
        text = path.read_bytes()[:64].decode("ascii", errors="replace").strip()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise IndexFormatError(f"{path} is a folder; it should be a file holding the current generation id") from None
    if not _ID.fullmatch(text):
        raise IndexFormatError(f"{path}: holds {text[:40]!r}, expected the current generation id (a positive integer)")
    return text


def generation_folder(root: str | Path, gid: str) -> Path:
    """Where generation ``gid`` of the index at ``root`` lives (the folder itself for ``0``)."""
    return Path(root) if gid == FLAT else Path(root) / FOLDER / gid


def current_folder(root: str | Path) -> Path:
    """The folder of the generation CURRENT names now (not held: for tools and tests that
    inspect files; readers use :func:`resolve`)."""
    return generation_folder(root, read_pointer(root) or FLAT)


@dataclass
class Generation:
    """One generation of an index, held: ``folder`` holds its files; until :meth:`release`
    (or the end of the process) a shared lock on ``folder`` keeps writers from removing it."""

    root: Path
    id: str
    folder: Path
    _fd: int | None = field(default=None, repr=False)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops its flock

    @property
    def held(self) -> bool:
        return self._fd is not None


def _lock_shared(folder: Path) -> int | None:
    """A descriptor of ``folder`` holding a shared flock; None when the folder is gone."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a writer renames this folder away
        except OSError:
            os.close(fd)
            raise
    return fd


def _same_folder(folder: Path, fd: int) -> bool:
    try:
        st = os.stat(folder)
    except OSError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def resolve(root: str | Path) -> Generation:
    """The current generation of the index at ``root``, held (call :meth:`Generation.release`
    when done). CURRENT is read once; the generation it names is locked and then checked to
    be the folder that was named (a writer may have removed it between the two steps: then
    CURRENT is read again). A folder without CURRENT is generation ``0`` (held the same way);
    a missing folder is returned unheld, for the caller's "no such index" error."""
    root = Path(root)
    for _ in range(_RETRIES):
        gid = read_pointer(root)
        if gid is None:
            fd = _lock_shared(root)
            if fd is None:
                return Generation(root, FLAT, root)
            if read_pointer(root) is None and _same_folder(root, fd):
                return Generation(root, FLAT, root, fd)
            os.close(fd)  # the first write into a flat index happened meanwhile
            continue
        folder = generation_folder(root, gid)
        fd = _lock_shared(folder)
        if fd is not None and _same_folder(folder, fd):
            return Generation(root, gid, folder, fd)
        if fd is not None:
            os.close(fd)
        if read_pointer(root) == gid:  # not a writer moving on: the generation named is missing
            raise IndexFormatError(f"{root}: {POINTER} names generation {gid}, but {folder} is missing")
    raise IndexFormatError(f"{root}: the index changed {_RETRIES} times while it was being opened; open it again")


# --- writers (under the index lock) --------------------------------------------------------


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot sync a folder
        pass
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as fh:
                os.fsync(fh.fileno())
        elif path.is_dir():
            _fsync_dir(path)
    _fsync_dir(folder)


def write_pointer(root: Path, gid: str) -> None:
    """Make ``gid`` current: CURRENT written beside itself, synced, renamed over (atomic)."""
    tmp = root / f".{POINTER}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with tmp.open("w", encoding="ascii") as fh:
        fh.write(gid + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.replace(tmp, root / POINTER)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(root)


def _generation_ids(root: Path) -> list[str]:
    folder = root / FOLDER
    if not folder.is_dir():
        return []
    return sorted((e.name for e in folder.iterdir() if _ID.fullmatch(e.name)), key=int)


def next_id(root: Path) -> str:
    current = read_pointer(root)
    ids = [int(g) for g in _generation_ids(root)] + [int(current or 0)]
    return str(max(ids) + 1)


@contextmanager
def new_generation(root: str | Path) -> Iterator[Path]:
    """Yield the folder of a new generation of the index at ``root`` (created, empty); when the
    block ends without an exception, the folder is synced and made current (CURRENT replaced).
    On an exception the folder is removed and CURRENT is untouched. The caller holds the index
    lock, and calls :func:`collect` once it has released the generation it read."""
    root = Path(root)
    collect(root)  # what a killed writer left
    gid = next_id(root)
    folder = generation_folder(root, gid)
    folder.mkdir(parents=True)
    try:
        yield folder
        _kill_point("generation:written")
        _fsync_tree(folder)
        _fsync_dir(folder.parent)
        _kill_point("generation:synced")
        write_pointer(root, gid)
        _kill_point("generation:current")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _try_exclusive(folder: Path) -> int | None:
    """A descriptor of ``folder`` holding an exclusive flock, or None when a reader holds it."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return None
    if fcntl is None:
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _remove_flat_files(root: Path) -> bool:
    """The top-level files of a flat index whose folder now has CURRENT (the first write into
    it), removed unless a reader holds the folder. Only the format's names are touched."""
    names = [n for n in _FLAT_NAMES if (root / n).exists() or (root / n).is_symlink()]
    if not names:
        return False
    fd = _try_exclusive(root)
    if fd is None:
        return False
    try:
        (root / MANIFEST).unlink(missing_ok=True)  # first: what is left is not an index any more
        for name in names:
            path = root / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    finally:
        os.close(fd)
    return True


def collect(root: str | Path) -> list[str]:
    """Remove every generation of ``root`` that CURRENT does not name and no reader holds
    (a stray one a killed writer left included), and the files of the flat layout once CURRENT
    exists; returns the ids removed. The caller holds the index lock (a writer's generation is
    never current before it is finished, so only the lock keeps it from being collected)."""
    root = Path(root)
    current = read_pointer(root)
    if current is None:
        return []
    removed = []
    for tmp in root.glob(f".{POINTER}.tmp-*"):  # a pointer a killed writer had not renamed yet
        tmp.unlink(missing_ok=True)
    if _remove_flat_files(root):
        removed.append(FLAT)
    folder = root / FOLDER
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        if entry.name.startswith(".trash-"):  # a removal a kill interrupted
            shutil.rmtree(entry, ignore_errors=True)
            continue
        if not _ID.fullmatch(entry.name) or entry.name == current:
            continue
        if fcntl is None and int(entry.name) == int(current) - 1:
            continue  # no locks here: the previous generation stays for the readers that may be on it
        fd = _try_exclusive(entry)
        if fd is None:
            continue  # a reader holds it: the next write tries again
        try:
            trash = folder / f".trash-{entry.name}-{uuid.uuid4().hex[:8]}"
            entry.rename(trash)  # out of readers' reach at once; then removed at leisure
        finally:
            os.close(fd)
        shutil.rmtree(trash, ignore_errors=True)
        removed.append(entry.name)
    return removed


def link_file(src: Path, dst: Path) -> bool:
    """``dst`` as a hard link to ``src`` (an unchanged file of the previous generation: files of
    a generation never change, so sharing them is safe); False where the file system cannot
    link (the caller writes the file instead)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        return False
    return True
