"""The HTTP contract against a real ``spectrag serve`` on 127.0.0.1: slow headers, hostile bodies,
loose types, the stated limits and the shutdown bound (issue 34, point 6).

    python bench/bench_http_contract.py --index DIR [--connections 200] [--graceful-s 2]

1. ``--connections`` clients each send a request line and then one header line every 2 s: how many
   are still open after the header time-out (+ 5 s), what they were answered, and ``/healthz``'s
   latency meanwhile.
2. Bodies a hostile client sends (invalid JSON, deep nesting, invalid UTF-8, a 5,000-digit integer,
   strings and booleans for numbers, a wrong method, an unknown path): status and whether the
   answer is ``{"error": ...}``.
3. ``/v1/info``'s limits against the request model's: ``k`` one past the stated maximum.
4. SIGTERM with 32 requests of 64 queries open: seconds to exit, against ``--graceful-s``.

Writes bench/results/http_contract_cpu.md and .json. Only loopback addresses; every loop is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

RESULTS = Path(__file__).parent / "results"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(index: str, port: int, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "spectrag.cli.main", "serve", index, "--port", str(port), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not start")


def slow_headers(port: int, n: int, header_timeout_s: float) -> dict:
    """n connections trickling header lines every 2 s for header_timeout_s + 5 s."""
    socks, answers = [], Counter()
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/retrieve HTTP/1.1\r\n")
        s.setblocking(False)
        socks.append(s)
    open_ = set(range(n))
    health = []
    start_t = time.monotonic()
    line = 0
    while time.monotonic() - start_t < header_timeout_s + 5:
        t = time.monotonic()
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
        health.append(1000 * (time.monotonic() - t))
        for i in list(open_):
            try:
                data = socks[i].recv(4096)
                answers[data.split(b"\r\n", 1)[0].decode() if data else "closed without an answer"] += 1
                open_.discard(i)
                continue
            except BlockingIOError:
                pass
            except OSError:
                open_.discard(i)
                answers["reset"] += 1
                continue
            if (time.monotonic() - start_t) // 2 > line:
                try:
                    socks[i].sendall(f"X-Slow-{line}: x\r\n".encode())
                except OSError:
                    open_.discard(i)
                    answers["reset"] += 1
        line = int((time.monotonic() - start_t) // 2)
        time.sleep(0.25)
    for s in socks:
        s.close()
    return {"connections": n, "still_open_after_s": round(time.monotonic() - start_t, 1), "still_open": len(open_),
            "answers": dict(answers), "healthz_ms_median": round(statistics.median(health), 1),
            "healthz_ms_max": round(max(health), 1)}


HOSTILE = {
    "invalid JSON": b"{not json",
    "nesting 50,000 deep": b"[" * 50_000 + b"]" * 50_000,
    "invalid UTF-8": b'{"query": "caf\xe9"}',
    "5,000-digit integer": b'{"query": "x", "k": ' + b"9" * 5000 + b"}",
    '"k": "5"': b'{"query": "x", "k": "5"}',
    '"k": true': b'{"query": "x", "k": true}',
    '"text": "yes"': b'{"query": "x", "text": "yes"}',
}


def hostile(port: int) -> list[dict]:
    url = f"http://127.0.0.1:{port}"
    rows = []
    with httpx.Client(timeout=30) as c:
        for name, body in HOSTILE.items():
            r = c.post(url + "/v1/retrieve", content=body, headers={"content-type": "application/json"})
            rows.append({"case": name, "status": r.status_code, "shape": sorted(r.json()), "error": r.json().get("error")})
        for name, r in (("GET /v1/retrieve (405)", c.get(url + "/v1/retrieve")), ("GET /nowhere (404)", c.get(url + "/nowhere"))):
            rows.append({"case": name, "status": r.status_code, "shape": sorted(r.json()), "error": r.json().get("error")})
        limits = c.get(url + "/v1/info").json()["limits"]
        over = c.post(url + "/v1/retrieve", json={"query": "x", "k": limits["k"]["max"] + 1})
        rows.append({"case": f"k = {limits['k']['max'] + 1} (info: max {limits['k']['max']})", "status": over.status_code,
                     "shape": sorted(over.json()), "error": over.json().get("error")})
        docs = c.get(url + "/docs")
        rows.append({"case": "GET /docs", "status": docs.status_code, "shape": ["text/html"],
                     "error": f"{len(docs.text):,} characters, external links: {docs.text.count('//cdn')}"})
    return rows


def sigterm(index: str, graceful_s: float) -> dict:
    port = free_port()
    proc = start(index, port, "--graceful-s", str(graceful_s))
    queries = [f"question {i} about the bridge and its designer" for i in range(64)]
    first = threading.Event()

    def post(_):
        try:
            return httpx.post(f"http://127.0.0.1:{port}/v1/retrieve", json={"queries": queries, "budget": 2000, "k": 5},
                              timeout=120).status_code
        except httpx.HTTPError:
            return "closed"
        finally:
            first.set()

    with ThreadPoolExecutor(32) as pool:
        answers = pool.map(post, range(32))
        first.wait(120)
        proc.send_signal(signal.SIGTERM)
        t = time.monotonic()
        code = proc.wait(60)
        exit_s = time.monotonic() - t
        answers = Counter(answers)
    return {"graceful_s": graceful_s, "exit_s": round(exit_s, 2), "code": code, "answers": dict(answers)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--header-timeout-s", type=float, default=10.0)
    ap.add_argument("--graceful-s", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3, help="SIGTERM runs")
    args = ap.parse_args()
    load0 = os.getloadavg()
    port = free_port()
    proc = start(args.index, port, "--header-timeout-s", str(args.header_timeout_s))
    try:
        slow = slow_headers(port, args.connections, args.header_timeout_s)
        bodies = hostile(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    stops = [sigterm(args.index, args.graceful_s) for _ in range(args.rounds)]
    load1 = os.getloadavg()
    out = {"command": " ".join(["python", *sys.argv]), "load_start": load0, "load_end": load1, "slow_headers": slow,
           "hostile": bodies, "sigterm": stops}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "http_contract_cpu.json").write_text(json.dumps(out, indent=1))
    lines = [f"# HTTP contract against `spectrag serve` ({args.index})", "",
             f"`{out['command']}`; load average {load0[0]:.2f} -> {load1[0]:.2f} (2 cores, shared).", "",
             f"## Slow headers: {args.connections} connections, a header line every 2 s, "
             f"`--header-timeout-s {args.header_timeout_s:g}`", "",
             f"After {slow['still_open_after_s']} s: **{slow['still_open']} still open**; answers: "
             + ", ".join(f"{k} x {v}" for k, v in slow["answers"].items())
             + f". `/healthz` meanwhile: median {slow['healthz_ms_median']} ms, max {slow['healthz_ms_max']} ms.", "",
             "## Hostile bodies and loose types", "", "| case | status | answer keys | error |", "|---|---:|---|---|"]
    lines += [f"| {r['case']} | {r['status']} | {', '.join(r['shape'])} | {str(r['error'])[:110]} |" for r in bodies]
    lines += ["", f"## SIGTERM with 32 x 64 queries open, `--graceful-s {args.graceful_s:g}`", "",
              "| run | exit after (s) | bound (grace + 1.5 s) | answers |", "|---:|---:|---:|---|"]
    lines += [f"| {i + 1} | {s['exit_s']} | {args.graceful_s + 1.5:g} | "
              + ", ".join(f"{k} x {v}" for k, v in s["answers"].items()) + " |" for i, s in enumerate(stops)]
    (RESULTS / "http_contract_cpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
