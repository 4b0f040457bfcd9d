"""The client against the test server: retries with backoff on timeouts, 429, 5xx and cut
responses; the cache resumes an interrupted run; failures lose nothing; usage and cost."""

from __future__ import annotations

import dataclasses

import pytest

from spectrag.errors import ConfigError, LLMError
from spectrag.llm import LLMClient, make_client
from spectrag.llm.prompts import hyde_prompt

QUESTIONS = [f"Who built bridge number {i}?" for i in range(12)]


def _prompts():
    return [hyde_prompt(q) for q in QUESTIONS]


def test_model_is_discovered_and_answers_come_in_order(llm_config, llm_server):
    client = LLMClient(llm_config)
    assert client.model == "fake-model"
    out = client.chat(_prompts(), stage="hyde")
    assert [c.text.split(" The answer")[0] for c in out] == QUESTIONS
    assert all(r["model"] == "fake-model" and r["temperature"] == 0.0 for r in llm_server.requests)


@pytest.mark.parametrize("fault", ["429", "500", "timeout", "truncated"])
def test_transient_failures_are_retried(llm_config, llm_server, fault):
    llm_server.delay = 1.5  # past the 0.5 s client timeout
    llm_server.fail(fault, times=2)
    client = LLMClient(llm_config)
    out = client.chat(_prompts()[:3], stage="s")
    assert all(c.text.startswith("Who built bridge") for c in out)
    u = client.usage["s"]
    assert (u.requests, u.calls, u.retries, u.failed) == (3, 3, 2, 0)
    assert sum(r["fault"] == fault for r in llm_server.requests) == 2


def test_a_rerun_is_answered_from_the_cache(llm_config, llm_server):
    first = LLMClient(llm_config).chat(_prompts(), stage="s")
    sent = len(llm_server.requests)
    again = LLMClient(llm_config)
    second = again.chat(_prompts(), stage="s")
    assert len(llm_server.requests) == sent == len(QUESTIONS)
    assert [c.text for c in second] == [c.text for c in first] and all(c.cached for c in second)
    assert (again.usage["s"].cached, again.usage["s"].calls, again.usage["s"].cost(llm_config)) == (12, 0, 0.0)
    # another parameter is another request
    LLMClient(dataclasses.replace(llm_config, max_tokens=7)).chat(_prompts()[:1], stage="s")
    assert len(llm_server.requests) == sent + 1


def test_persistent_failures_raise_after_the_rest_is_cached_and_a_rerun_resumes(llm_config, llm_server):
    llm_server.fail("500", times=100, when="number 4?")
    client = LLMClient(llm_config)
    with pytest.raises(LLMError, match=r"1 of 12 s requests .* failed after 3 retries .* the 11 that succeeded are kept"):
        client.chat(_prompts(), stage="s")
    assert client.usage["s"].failed == 1 and client.usage["s"].calls == 11
    llm_server.reset()  # the server recovers: only the failed prompt is asked again
    out = LLMClient(llm_config).chat(_prompts(), stage="s")
    assert len(llm_server.requests) == 1 and "number 4?" in llm_server.requests[0]["messages"][1]["content"]
    assert out[4].text.startswith("Who built bridge number 4?")


def test_duplicate_prompts_are_sent_once(llm_config, llm_server):
    out = LLMClient(llm_config).chat(_prompts()[:2] * 3, stage="s")
    assert len(llm_server.requests) == 2 and [c.text for c in out[:2]] == [c.text for c in out[4:]]


def test_usage_and_cost(llm_config, llm_server):
    config = dataclasses.replace(llm_config, price_prompt=2.0, price_completion=10.0)
    client = LLMClient(config)
    out = client.chat(_prompts()[:4], stage="hyde")
    # the test server reports the words of the user message and of the reply as tokens
    prompt_words = sum(len(p[1]["content"].split()) for p in _prompts()[:4])
    reply_words = sum(len(c.text.split()) for c in out)
    u = client.report()["stages"]["hyde"]
    assert (u["prompt_tokens"], u["completion_tokens"]) == (prompt_words, reply_words)
    assert u["cost"] == pytest.approx((prompt_words * 2.0 + reply_words * 10.0) / 1000)
    assert client.report()["total"]["cost"] == pytest.approx(u["cost"])


def test_errors_a_retry_cannot_fix(llm_config, llm_server, monkeypatch):
    with pytest.raises(ConfigError, match="--llm-base-url"):
        LLMClient(dataclasses.replace(llm_config, base_url=""))
    assert make_client(dataclasses.replace(llm_config, base_url="")) is None
    bad = LLMClient(dataclasses.replace(llm_config, base_url=llm_server.url.replace("/v1", "/nope"), model="m"))
    with pytest.raises(LLMError, match=r"not found \(404\)"):
        bad.chat(_prompts()[:1], stage="s")
    dead = LLMClient(dataclasses.replace(llm_config, base_url="http://127.0.0.1:9/v1", max_retries=1))
    with pytest.raises(LLMError, match="cannot list the models"):
        dead.model
    dead = LLMClient(dataclasses.replace(dead.config, model="m"))
    with pytest.raises(LLMError, match="1 of 1 s requests .* failed after 1 retries"):
        dead.chat(_prompts()[:1], stage="s")
