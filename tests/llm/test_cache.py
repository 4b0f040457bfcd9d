"""The response cache: keys, persistence across instances, concurrent writers."""

from __future__ import annotations

import threading

from spectrag.llm.cache import Completion, ResponseCache, request_key


def test_request_key_is_canonical_and_covers_every_parameter():
    a = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.0, "max_tokens": 5}
    same = {"max_tokens": 5, "temperature": 0.0, "messages": [{"content": "hi", "role": "user"}], "model": "m"}
    assert request_key(a) == request_key(same)
    for change in ({"model": "n"}, {"temperature": 0.5}, {"max_tokens": 6},
                   {"messages": [{"role": "user", "content": "hi!"}]}, {"response_format": {"type": "json_object"}}):
        assert request_key({**a, **change}) != request_key(a), change


def test_entries_survive_a_new_instance(tmp_path):
    first = ResponseCache(tmp_path)
    first.put("k1", "m", Completion("one", "stop", 3, 1))
    first.close()
    again = ResponseCache(tmp_path)
    got = again.get_many(["k1", "k2"])
    assert list(got) == ["k1"] and got["k1"] == Completion("one", "stop", 3, 1, cached=True)
    assert len(again) == 1


def test_concurrent_writers_lose_nothing(tmp_path):
    cache = ResponseCache(tmp_path)

    def write(t: int) -> None:
        for i in range(50):
            cache.put(f"{t}-{i}", "m", Completion(f"text {t} {i}", "stop", i, t))

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    keys = [f"{t}-{i}" for t in range(4) for i in range(50)]
    got = cache.get_many(keys)
    assert len(got) == 200 and got["3-49"].text == "text 3 49"
