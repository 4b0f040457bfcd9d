"""``LLMClient``: many chat prompts at once through any OpenAI-compatible endpoint.

``client.chat(prompts, stage="answer")`` returns one :class:`Completion` per prompt, in order:

    1. every prompt's cache key (:func:`spectrag.llm.cache.request_key`) looked up at once;
    2. the misses sent ``concurrency`` at a time from a thread pool (the ``openai`` client is
       thread-safe), each retried with exponential backoff on timeouts, lost connections, 429
       and 5xx (and on a response body that is not valid JSON);
    3. each answer committed to the cache when it arrives, so an interrupted run resumes.

A request still failing after its retries does not stop the others: they finish and are
cached, then :class:`~spectrag.errors.LLMError` says how many failed and why. Errors that a
retry cannot fix (401, 404, 400) stop at once with what to change. Token counts and cost are
kept per stage (:class:`StageUsage`; cost from ``llm.price_prompt`` / ``price_completion``
per 1,000 tokens, paid calls only: a cached answer costs nothing).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from typing import Any

from spectrag.util.console import bar as console_bar

from spectrag.config import LLMConfig
from spectrag.errors import ConfigError, LLMError
from spectrag.llm.cache import Completion, ResponseCache, default_llm_cache_dir, request_key

Messages = list[dict[str, str]]
RETRY_STATUS = (408, 409, 429)  # and every 5xx


def _openai():
    try:
        import openai  # optional: the `llm` extra
    except ImportError:
        raise ConfigError("the LLM stages need the openai package: pip install 'spectrag[llm]' "
                          "(or pip install openai)") from None
    return openai


@dataclass
class StageUsage:
    """What one stage asked of the LLM. ``requests`` = ``cached`` + ``calls`` + ``failed``;
    ``malformed``: answers the stage could not parse (counted by the stage, skipped)."""

    requests: int = 0
    cached: int = 0
    calls: int = 0
    failed: int = 0
    retries: int = 0
    truncated: int = 0  # finish_reason "length": the answer hit max_tokens
    malformed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def cost(self, config: LLMConfig) -> float:
        return (self.prompt_tokens * config.price_prompt + self.completion_tokens * config.price_completion) / 1000.0


class _Retryable(Exception):
    """A failure worth retrying; ``wait`` is the server's Retry-After in seconds, if any."""

    def __init__(self, message: str, wait: float | None = None) -> None:
        super().__init__(message)
        self.wait = wait


class LLMClient:
    """Chat completions from ``config.base_url`` (:class:`spectrag.config.LLMConfig`).

    ``model`` is resolved on first use: ``config.model``, else the server's only model
    (``GET /models``). The API key is read from ``$<config.api_key_env>``; a local server that
    needs none gets a placeholder.
    """

    def __init__(self, config: LLMConfig) -> None:
        if not config.base_url:
            raise ConfigError("no LLM endpoint configured: pass --llm-base-url URL (or set base_url in the [llm] table)")
        self.config = config
        openai = _openai()
        self._errors = openai
        key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""
        # retries are ours (counted, with Retry-After), so the SDK's own are off
        self._api = openai.OpenAI(base_url=config.base_url.rstrip("/"), api_key=key or "not-needed",
                                  timeout=config.timeout, max_retries=0)
        self._has_key = bool(key)
        cache_dir = default_llm_cache_dir() if config.cache_dir is None else config.cache_dir
        self.cache = ResponseCache(cache_dir) if cache_dir != "" else None
        self._model = config.model or None
        self.usage: dict[str, StageUsage] = {}
        self._lock = threading.Lock()

    # --- model --------------------------------------------------------------------------

    @property
    def model(self) -> str:
        if self._model is None:
            self._model = self._only_model()
        return self._model

    def _only_model(self) -> str:
        try:
            names = sorted(m.id for m in self._api.models.list())
        except self._errors.APIError as exc:
            raise LLMError(f"{self.config.base_url}: cannot list the models to pick one ({_describe(exc)}); "
                           "pass --llm-model NAME") from None
        if len(names) != 1:
            listed = ", ".join(names[:20]) or "none"
            raise LLMError(f"{self.config.base_url} serves {len(names)} models ({listed}); pass --llm-model NAME")
        return names[0]

    # --- requests -----------------------------------------------------------------------

    def request(self, messages: Messages, *, max_tokens: int | None = None, json_output: bool = False) -> dict[str, Any]:
        """The request body sent for ``messages`` (also the cache key's input)."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.config.temperature,
                                "max_tokens": int(max_tokens or self.config.max_tokens)}
        if json_output and self.config.json_mode:
            body["response_format"] = {"type": "json_object"}
        return body

    def chat(self, prompts: Sequence[Messages], *, stage: str, max_tokens: int | None = None,
             json_output: bool = False, progress: bool = False) -> list[Completion]:
        """One completion per prompt, in order (see the module docstring). ``json_output``: the
        prompts ask for JSON (``response_format`` is sent when ``llm.json_mode`` is on)."""
        start = time.perf_counter()
        usage = self.usage.setdefault(stage, StageUsage())
        bodies = [self.request(list(p), max_tokens=max_tokens, json_output=json_output) for p in prompts]
        keys = [request_key(b) for b in bodies]
        found = self.cache.get_many(list(dict.fromkeys(keys))) if self.cache is not None else {}
        out: list[Completion | None] = [found.get(k) for k in keys]
        todo: dict[str, list[int]] = {}  # one call per distinct request
        for i, (k, c) in enumerate(zip(keys, out)):
            if c is None:
                todo.setdefault(k, []).append(i)
        usage.requests += len(prompts)
        usage.cached += len(prompts) - sum(len(v) for v in todo.values())
        failures: list[str] = []
        if todo:
            bar = console_bar(total=len(todo), desc=f"llm {stage}", unit=" requests", show=progress)
            workers = min(self.config.concurrency, len(todo))
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="spectrag-llm") as pool:
                futures = {pool.submit(self._call, bodies[where[0]], usage): (key, where) for key, where in todo.items()}
                try:
                    for fut in as_completed(futures):
                        key, where = futures[fut]
                        try:
                            completion = fut.result()
                        except _Retryable as exc:
                            failures.append(str(exc))
                            with self._lock:
                                usage.failed += len(where)
                        else:
                            if self.cache is not None:
                                self.cache.put(key, self.model, completion)
                            for i in where:
                                out[i] = completion
                        bar.update(1)
                except BaseException:
                    for f in futures:  # stop what has not started; what finished is cached
                        f.cancel()
                    raise
                finally:
                    bar.close()
        usage.seconds += time.perf_counter() - start
        if failures:
            done = len(todo) - len(failures)
            where = f" and cached under {self.cache.path.parent}" if self.cache is not None else ""
            raise LLMError(f"{len(failures)} of {len(todo)} {stage} requests to {self.config.base_url} failed after "
                           f"{self.config.max_retries} retries (last: {failures[-1]}); the {done} that succeeded are "
                           f"kept{where}: run again to resume")
        return out  # type: ignore[return-value]

    def _call(self, body: dict[str, Any], usage: StageUsage) -> Completion:
        """One request with retries; raises :class:`_Retryable` when they are spent."""
        # ours, not the openai client's retries or tenacity: each retry is counted in the stage's
        # usage report and a Retry-After header is honoured up to max_backoff, in six lines
        cfg = self.config
        for attempt in range(cfg.max_retries + 1):
            try:
                return self._once(body, usage)
            except _Retryable as exc:
                if attempt == cfg.max_retries:
                    raise
                with self._lock:
                    usage.retries += 1
                delay = min(cfg.max_backoff, cfg.backoff * 2.0 ** attempt)
                if exc.wait is not None:
                    delay = min(cfg.max_backoff, max(delay, exc.wait))
                time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _once(self, body: dict[str, Any], usage: StageUsage) -> Completion:
        e = self._errors
        try:
            resp = self._api.chat.completions.create(**body)
        except (e.APITimeoutError, e.APIConnectionError) as exc:
            raise _Retryable(_describe(exc)) from None
        except e.APIStatusError as exc:
            status = exc.status_code
            if status in RETRY_STATUS or status >= 500:
                raise _Retryable(_describe(exc), _retry_after(exc)) from None
            raise LLMError(self._refusal(exc)) from None
        except (e.APIResponseValidationError, json.JSONDecodeError, ValueError) as exc:
            raise _Retryable(f"unreadable response ({type(exc).__name__}: {str(exc)[:120]})") from None
        if not getattr(resp, "choices", None):
            raise _Retryable("response without choices")
        choice = resp.choices[0]
        text = (choice.message.content if choice.message is not None else None) or ""
        u = getattr(resp, "usage", None)
        completion = Completion(text, str(choice.finish_reason or ""), int(getattr(u, "prompt_tokens", 0) or 0),
                                int(getattr(u, "completion_tokens", 0) or 0))
        with self._lock:
            usage.calls += 1
            usage.prompt_tokens += completion.prompt_tokens
            usage.completion_tokens += completion.completion_tokens
            usage.truncated += completion.finish_reason == "length"
        return completion

    def _refusal(self, exc) -> str:
        base, status = self.config.base_url, exc.status_code
        if status in (401, 403):
            hint = (f"the key in ${self.config.api_key_env} was refused" if self._has_key
                    else f"set the API key in ${self.config.api_key_env} (or name another variable with --llm-api-key-env)")
            return f"{base} refused the request ({status}): {hint}"
        if status == 404:
            return f"{base}: not found (404) for model {self.model!r}: check --llm-base-url (it ends in /v1) and --llm-model"
        return f"{base} rejected the request ({status}): {_describe(exc)}"

    # --- reports ------------------------------------------------------------------------

    def note_malformed(self, stage: str, count: int) -> None:
        """Answers of ``stage`` that could not be parsed (the stage counts them)."""
        with self._lock:
            self.usage.setdefault(stage, StageUsage()).malformed += count

    def report(self) -> dict[str, Any]:
        """Per stage: requests, cache hits, calls, failures, retries, tokens, seconds and cost."""
        stages = {}
        for name, u in self.usage.items():
            stages[name] = {**asdict(u), "seconds": round(u.seconds, 3), "cost": round(u.cost(self.config), 6)}
        total = {k: sum(s[k] for s in stages.values()) for k in ("requests", "cached", "calls", "prompt_tokens",
                                                                  "completion_tokens", "cost")}
        return {"base_url": self.config.base_url, "model": self._model or self.config.model,
                "price_per_1k": {"prompt": self.config.price_prompt, "completion": self.config.price_completion},
                "cache": str(self.cache.path) if self.cache is not None else None, "stages": stages, "total": total}

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
        self._api.close()


def _describe(exc) -> str:
    status = getattr(exc, "status_code", None)
    text = str(getattr(exc, "message", "") or exc).strip().replace("\n", " ")
    return (f"HTTP {status}: " if status else f"{type(exc).__name__}: ") + text[:200]


def _retry_after(exc) -> float | None:
    try:
        value = exc.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


def make_client(config: LLMConfig | LLMClient | None) -> LLMClient | None:
    """An :class:`LLMClient` for ``config`` (None, or a config without ``base_url``: None)."""
    if config is None or isinstance(config, LLMClient):
        return config
    return LLMClient(config) if config.enabled else None
