"""Errors the engine raises on bad input.

Every error a user can cause derives from :class:`SpectragError`; the CLI prints its message
on one line and exits non-zero, without a traceback unless ``--debug`` is given.
"""

from __future__ import annotations


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
