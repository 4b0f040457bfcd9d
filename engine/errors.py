"""Errors the engine raises on bad input.

Every error a user can cause derives from :class:`SpectragError`; the CLI prints its message
on one line and exits non-zero, without a traceback unless ``--debug`` is given.
"""

from __future__ import annotations

from itertools import islice


class SpectragError(Exception):
    """Base class of all user-facing errors: the message names the problem and the value."""


class CorpusError(SpectragError):
    """A corpus file or folder cannot be read as the expected format."""


class ConfigError(SpectragError, ValueError):
    """A configuration value or file is invalid: the message names ``table.field``, what is
    allowed and what was given."""


class IndexFormatError(SpectragError):
    """An index directory is missing, incomplete, corrupt or of another format version."""


class LLMError(SpectragError):
    """An LLM endpoint could not be used: unreachable, refusing the key or the model, or requests
    that failed after every retry (those that succeeded are cached: a re-run resumes)."""


def brief(value: object, *, chars: int = 80, items: int = 5) -> str:
    """``repr(value)`` short enough for a one-line error: a long string shows its first ``chars``
    characters and its length, a list / tuple / dict / set its first ``items`` entries (each
    brief) and its length. Every error that echoes a value it was given goes through this."""
    if isinstance(value, str):
        if len(value) <= chars:
            return repr(value)
        return f"{value[:chars]!r}... ({len(value):,} characters)"
    if isinstance(value, dict):
        shown = ", ".join(f"{brief(k, chars=chars // 2, items=2)}: {brief(v, chars=chars // 2, items=2)}"
                          for k, v in islice(value.items(), items))
        more = f", ... ({len(value):,} entries)" if len(value) > items else ""
        return "{" + shown + more + "}"
    if isinstance(value, (list, tuple, set, frozenset)):
        shown = ", ".join(brief(v, chars=chars // 2, items=2) for v in islice(value, items))
        more = f", ... ({len(value):,} items)" if len(value) > items else ""
        open_, close = {list: "[]", tuple: "()"}.get(type(value), "{}")
        return open_ + shown + ("," if isinstance(value, tuple) and len(value) == 1 else "") + more + close
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * chars:
        # repr of an integer past 4,300 digits raises; its size is what matters
        return f"<an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits>"
    text = repr(value)
    if len(text) <= chars:
        return text
    return f"{text[:chars]}... ({len(text):,} characters)"
