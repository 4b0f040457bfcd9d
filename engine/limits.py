"""The checks a query request gets before any model or index loads: the queries, ``k`` against
the mode's candidate pool, positive counts. Only the config is imported here (no torch), so a
command line error is found in a fraction of a second (:mod:`spectrag.cli.retrieve`)."""

from __future__ import annotations

from collections.abc import Iterable

from spectrag.config import MAX_QUERY_CHARS, RetrieverConfig
from spectrag.errors import SpectragError, brief
from spectrag.util.io import check_unicode


def check_queries(queries: list[str]) -> list[str]:
    """The queries as a list; :class:`SpectragError` for none, for one that is not a string, is
    empty or is over ``MAX_QUERY_CHARS`` characters (the server's limit too); numbered from 1,
    as the command line's ids ``q1``, ``q2``, ... are."""
    if isinstance(queries, (str, bytes)) or not isinstance(queries, Iterable):
        raise SpectragError(f"queries must be a string or a list of strings, got {type(queries).__name__} "
                            f"{brief(queries)}")
    queries = list(queries)
    if not queries:
        raise SpectragError("no queries given")
    for i, q in enumerate(queries, start=1):
        name = f"query {i}" + (f" of {len(queries)}" if len(queries) > 1 else "")
        if not isinstance(q, str):
            raise SpectragError(f"{name} is not a string (got {type(q).__name__} {brief(q)})")
        if not q.strip():
            raise SpectragError(f"{name} is empty; every query needs some text")
        if len(q) > MAX_QUERY_CHARS:
            raise SpectragError(f"{name} has {len(q):,} characters; at most {MAX_QUERY_CHARS:,} (a query, not a "
                                "document: the embedder reads about the first 1,000)")
        check_unicode(q, name)
    return queries


def _positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise SpectragError(f"{name} must be an integer >= 1, got {brief(value)}")


def pool_limit(config: RetrieverConfig, mode: str | None = None) -> tuple[int, list[str]]:
    """The most candidates ``mode`` (default: the config's) ranks per query, and the settings
    that bound it: the baselines rank their seed list, the other modes the expanded pool."""
    mode = mode or config.mode
    sc, cap = config.seed, config.expand.max_candidates
    depth, names = {"dense": (sc.k_dense, ["seed.k_dense"]), "hyde": (sc.k_dense, ["seed.k_dense"]),
                    "bm25": (sc.k_bm25, ["seed.k_bm25"]),
                    "hybrid": (max(sc.k_dense, sc.k_bm25), ["seed.k_dense", "seed.k_bm25"])}.get(mode, (cap, []))
    return (cap, ["expand.max_candidates"]) if depth >= cap else (depth, names)


def check_k(k: int | None, config: RetrieverConfig, mode: str | None = None) -> None:
    """``k`` is an integer >= 1 that the mode's candidate pool can fill; a larger ``k`` is an
    error naming the setting to raise, never a silently shorter list (a corpus with fewer
    chunks than ``k`` still gives them all)."""
    _positive("k", k)
    if k is None:
        return
    limit, settings = pool_limit(config, mode)
    if k > limit:
        raise SpectragError(f"k = {k} is more than mode {mode or config.mode!r} ranks per query "
                            f"({' / '.join(settings)} = {limit}): ask for at most {limit}, or raise "
                            f"{' and '.join(settings)} (a TOML table in --config, or RetrieverConfig.replace)")


def check_index_folder(path) -> None:
    """A missing index folder, refused before the store (and torch) loads, with the store's own
    message; a folder that an interrupted swap left as a hidden sibling is not refused here (the
    store recovers it: :func:`spectrag.store.recover_index`)."""
    from pathlib import Path

    from spectrag.errors import IndexFormatError

    path = Path(path)
    if path.exists():
        return
    parent = path.parent
    if parent.is_dir() and any(e.name.startswith(f".{path.name}.") for e in parent.iterdir()):
        return
    raise IndexFormatError(f"{path}: no such index folder")
