"""The ``--llm-*`` flags shared by ``index``, ``retrieve``, ``answer`` and ``eval``: they set the
fields of :class:`spectrag.config.LLMConfig` over the ``[llm]`` table of ``--config``."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable

import click

from spectrag.config import LLMConfig, load_llm_config

#: flag -> (LLMConfig field, click type, help)
FLAGS = {
    "--llm-base-url": ("base_url", str, "OpenAI-compatible API root, e.g. http://localhost:8000/v1 (vLLM), "
                                        "http://localhost:11434/v1 (Ollama), http://localhost:8080/v1 (llama.cpp)."),
    "--llm-model": ("model", str, "Model name on that server (default: its only model, from GET /models)."),
    "--llm-api-key-env": ("api_key_env", str, "Environment variable holding the API key (default: OPENAI_API_KEY; "
                                              "a local server needs none)."),
    "--llm-max-tokens": ("max_tokens", int, "Completion tokens per request (default: 512)."),
    "--llm-temperature": ("temperature", float, "Sampling temperature (default: 0)."),
    "--llm-timeout": ("timeout", float, "Seconds per request before it is retried (default: 120)."),
    "--llm-retries": ("max_retries", int, "Retries on timeouts, 429 and 5xx, with exponential backoff (default: 5)."),
    "--llm-concurrency": ("concurrency", int, "Requests in flight at once (default: 8)."),
    "--llm-cache-dir": ("cache_dir", str, "Response cache folder; '' disables it (default: ~/.cache/spectrag/llm)."),
    "--llm-price-prompt": ("price_prompt", float, "Cost per 1,000 prompt tokens, for the cost report (default: 0)."),
    "--llm-price-completion": ("price_completion", float, "Cost per 1,000 completion tokens (default: 0)."),
}


def llm_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the ``--llm-*`` flags; the command receives ``llm_flags`` (field -> value given)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        flags = {field: kwargs.pop(f"llm_{field}") for field, _, _ in FLAGS.values()}
        flags["json_mode"] = kwargs.pop("llm_json_mode") or None
        return fn(*args, llm_flags=flags, **kwargs)

    wrapper = click.option("--llm-json-mode", "llm_json_mode", is_flag=True,
                           help="Send response_format json_object with the prompts that ask for JSON.")(wrapper)
    for flag, (field, kind, text) in reversed(FLAGS.items()):
        wrapper = click.option(flag, f"llm_{field}", type=kind, default=None, help=text)(wrapper)
    return wrapper


def llm_config(config_file: Path | None, flags: dict[str, Any]) -> LLMConfig:
    """The ``[llm]`` table of ``config_file`` (if any) with the flags that were given over it."""
    return load_llm_config(config_file, **flags)
