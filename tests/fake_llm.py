"""A small OpenAI-compatible chat server for the tests (no model exists on these machines): it
answers deterministically from the prompt, and can be told to fail.

    POST /v1/chat/completions   the task is recognized by the system message of the prompts in
                                spectrag.llm.prompts; the answer is derived from the prompt text
    GET  /v1/models             one model, ``fake-model``

Answers: utility questions are the passage's sentences turned into yes/no questions; OpenIE
takes the capitalized spans as entities and links consecutive ones; HyDE repeats the question;
an iterative step asks one follow-up first and answers once it has notes; the final answer is
the title of the first passage shown, citing its id. So a deterministic fake, not a model.

Faults, consumed by the next requests (``server.fail("429", times=2)``) or by the requests whose
prompt contains a text, or all of several (``server.fail("bad_json", when=("Veltra", "questions"))``): ``timeout`` (answer after
``server.delay`` seconds), ``429`` (with Retry-After: 0), ``500``, ``truncated`` (the HTTP body
cut short), ``bad_json`` (the model's JSON cut short), ``bad_triples`` (triples that are not
three strings beside one good one), ``empty`` (no content).
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fake-model"
_CAPS = re.compile(r"\b[A-Z][a-zA-Z]+(?: (?:of |the )?[A-Z][a-zA-Z]+)*")


def _passage(user: str) -> tuple[str, str]:
    title = re.search(r"^Title: (.*)$", user, re.M)
    text = user.split("Passage:\n", 1)[1] if "Passage:\n" in user else user
    return (title.group(1) if title else ""), text.strip()


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.strip()) > 3]


def answer_for(system: str, user: str) -> str:
    """The deterministic reply to one prompt."""
    if system.startswith("You write utility questions"):
        n = int(re.search(r"Write (\d+) questions", user).group(1))
        _, text = _passage(user)
        qs = [f"Is it true that {s.rstrip('.!?')}?" for s in _sentences(text)[:n]]
        return "Here are the questions:\n```json\n" + json.dumps({"questions": qs}) + "\n```"
    if system.startswith("You build a knowledge graph"):
        _, text = _passage(user)
        ents = list(dict.fromkeys(_CAPS.findall(text)))[:8]
        triples = [[a, "is mentioned with", b] for a, b in zip(ents, ents[1:])]
        return json.dumps({"named_entities": ents, "triples": triples})
    if system.startswith("You write short encyclopedia"):
        q = user.split("Question: ", 1)[1].split("\nPassage:", 1)[0]
        return f"{q} The answer to this question is described here."
    ids = re.findall(r"^\[(\d+)\]", user, re.M)
    titles = re.findall(r"^## (.+)$", user, re.M)
    first_id, first_title = (ids[0] if ids else "0"), (titles[0] if titles else "unknown")
    if "Original question:" in user:  # an iterative step
        question = user.rsplit("Original question: ", 1)[1].strip()
        if "Notes from previous steps" not in user:
            return f"Notes: the passage [{first_id}] is a start.\nFollow-up question: {question} (more detail)"
        return f"Notes: enough now [{first_id}].\nAnswer: {first_title}"
    return f"The knowledge text names it in [{first_id}].\nAnswer: {first_title}"


class FakeLLM:
    """The server in a background thread on 127.0.0.1 (a free port); ``url`` ends in ``/v1``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[dict] = []
        self.queue: list[str] = []
        self.rules: list[list] = []  # [texts, fault, remaining]
        self.delay = 2.0
        handler = type("Handler", (_Handler,), {"fake": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def fail(self, fault: str, *, times: int = 1, when: str | tuple[str, ...] | None = None) -> None:
        with self.lock:
            if when is None:
                self.queue += [fault] * times
            else:
                self.rules.append([(when,) if isinstance(when, str) else tuple(when), fault, times])

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.queue.clear()
            self.rules.clear()
            self.delay = 2.0

    def _fault(self, text: str) -> str | None:
        with self.lock:
            for rule in self.rules:
                if all(part in text for part in rule[0]) and rule[2] > 0:
                    rule[2] -= 1
                    return rule[1]
            return self.queue.pop(0) if self.queue else None

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    fake: FakeLLM
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict | bytes, headers: dict | None = None, cut: bool = False) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data[: len(data) // 2] if cut else data)
        if cut:
            self.close_connection = True

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "tests"}]})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        messages = body.get("messages", [])
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        fault = self.fake._fault(user)
        with self.fake.lock:
            self.fake.requests.append({**body, "fault": fault})
        try:
            if fault == "timeout":
                time.sleep(self.fake.delay)
            if fault == "429":
                self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}}, {"Retry-After": "0"})
                return
            if fault == "500":
                self._send(500, {"error": {"message": "server error"}})
                return
            text = answer_for(system, user)
            if fault == "bad_json":
                text = text[: max(1, len(text) // 2)]
            elif fault == "bad_triples":
                text = json.dumps({"named_entities": ["A", 7], "triples": [["A", "b"], ["A", "rel", "B"], [1, 2, 3], "x"]})
            elif fault == "empty":
                text = ""
            words = len(user.split())
            reply = {"id": "fake", "object": "chat.completion", "created": 0, "model": body.get("model", MODEL),
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": text}}],
                     "usage": {"prompt_tokens": words, "completion_tokens": len(text.split()),
                               "total_tokens": words + len(text.split())}}
            self._send(200, reply, cut=fault == "truncated")
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout): nothing to do
            pass
