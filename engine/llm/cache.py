"""The persistent response cache: ``key -> completion``, one SQLite file shared by every run.

The key is the SHA-256 of the request as JSON (model, messages, temperature, max tokens,
response format; :func:`request_key`), so the same prompt to the same model with the same
parameters is paid for once. Each response is committed as soon as it arrives (SQLite commits
are atomic): a run interrupted at any point keeps every answer it had received, and the next
run asks only for the rest. Several threads (the client's pool) and several processes may share
the file (WAL journal, one connection per cache guarded by a lock). The server's base URL is
not part of the key: moving a model to another host does not pay for it again.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spectrag.errors import ConfigError
from spectrag.util.io import default_cache_dir

FILE = "responses.sqlite"
# Ours over sqlite3 (standard library): JSON rows committed one by one, shared by threads and
# processes (WAL); diskcache would add a dependency that pickles values by default.


def default_llm_cache_dir() -> Path:
    """``$SPECTRAG_CACHE_DIR/llm``, else ``~/.cache/spectrag/llm`` (the embedding cache's root)."""
    return default_cache_dir() / "llm"


def request_key(request: dict[str, Any]) -> str:
    """SHA-256 of the request's canonical JSON (sorted keys, no whitespace)."""
    canonical = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Completion:
    """One chat completion: its text, why it stopped (``stop``, ``length``, ...), its token
    counts as the server reported them (0 when it did not) and whether it came from the cache."""

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool = False


class ResponseCache:
    """SQLite store of completions by :func:`request_key`."""

    def __init__(self, folder: str | Path) -> None:
        folder = Path(folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self.path = folder / FILE
            self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, model TEXT, text TEXT, "
                "finish_reason TEXT, prompt_tokens INTEGER, completion_tokens INTEGER, created REAL)"
            )
            self._db.commit()
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"llm.cache_dir {folder}: cannot open the response cache ({exc})") from None
        self._lock = threading.Lock()

    def get_many(self, keys: list[str]) -> dict[str, Completion]:
        """The cached completions among ``keys``."""
        out: dict[str, Completion] = {}
        with self._lock:
            for lo in range(0, len(keys), 500):  # SQLite's bound-parameter limit
                part = keys[lo : lo + 500]
                rows = self._db.execute(
                    f"SELECT key, text, finish_reason, prompt_tokens, completion_tokens FROM responses "
                    f"WHERE key IN ({','.join('?' * len(part))})", part
                ).fetchall()
                for key, text, reason, pt, ct in rows:
                    out[key] = Completion(text, reason, pt, ct, cached=True)
        return out

    def put(self, key: str, model: str, completion: Completion) -> None:
        """Store and commit one completion (called from the client's worker threads)."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, model, completion.text, completion.finish_reason, completion.prompt_tokens,
                 completion.completion_tokens, time.time()),
            )
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
