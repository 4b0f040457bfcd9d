"""Benchmark: does `spectrag serve` hold against hostile bodies and shut down within its grace
period? (issue 25)

Each scenario starts a fresh ``spectrag serve INDEX`` process on a free loopback port and runs
against it from this process; with ``--before PYTHONPATH`` (a checkout of the code before the
fix, see below) every scenario runs on that code too, in the same run, so the two rows compare
like with like on this machine.

* ``chunked``: uploads without a Content-Length (chunked, 64 KiB pieces) of 200 MB and 30 MB,
  and one of 2 MB with a Content-Length: status, seconds until the answer, bytes the client had
  sent by then, and the server's resident memory before and after (VmRSS, and the peak VmHWM,
  from ``/proc/PID/status``).
* ``slow-bodies``: ``--slow`` connections that send the headers and half of a body, then
  nothing; ``/healthz`` timed (``--probes`` sequential requests, p50 / p99 / max) with none open,
  with all of them open, and with all of them open while 4 clients keep POSTing queries; then,
  after the body time-out (``--body-timeout-s``), how many of those connections got their 408.
* ``shutdown``: the issue's recipe: ``--clients`` concurrent POST /retrieve of ``--queries``
  queries each, SIGTERM once the first answer is in, ``--graceful-s`` 1 (past the grace period:
  the open requests must get a 200 or a 503, never a 500) and ``--within-s`` (a grace period long
  enough: every request answered); statuses, seconds from the signal to the exit, and whether
  the server's log holds a traceback.

Usage::

    python bench/bench_serve_limits.py --index DIR [--before /tmp/old-spectrag] [--scenarios chunked,slow-bodies,shutdown]

``--before``: a folder holding a package ``spectrag`` of the old code, e.g. made from the commit
before the fix: ``git archive COMMIT engine kernels | tar -x -C /tmp/old && mkdir /tmp/old-spectrag
&& cp -r /tmp/old/engine /tmp/old-spectrag/spectrag && cp -r /tmp/old/kernels /tmp/old-spectrag/spectrag/kernels``.

Results: ``bench/results/serve_limits_cpu.md`` (and ``.json``).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from _common import ROOT, finish_record, md_table, new_record, results_header, write_results
from bench_serve import free_port


def start(index: str, code: str | None, extra: list[str]):
    """``spectrag serve INDEX`` (the current code, or the package under ``code``) on a free
    port, once ``/healthz`` answers; returns (process, url, log file)."""
    import httpx

    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", prefix="spectrag-serve-", suffix=".log", delete=False)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **({"PYTHONPATH": code} if code else {})}
    proc = subprocess.Popen([sys.executable, "-m", "spectrag.cli.main", "serve", index, "--port", str(port),
                             "--log-level", "warning", *extra], stdout=subprocess.DEVNULL, stderr=log, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}; its log: {log.name}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url, log
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not come up within 300 s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def memory_mib(pid: int) -> dict:
    fields = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
    return fields


# ------------------------------------------------------------------------------------- chunked


def chunked(index: str, code: str | None, label: str) -> list[dict]:
    import httpx

    proc, url, _ = start(index, code, [])
    rows = []
    try:
        for mb, framing in ((200, "chunked"), (30, "chunked"), (2, "content-length")):
            sent = [0]
            total = mb << 20

            def body():
                yield b'{"query": "'
                while sent[0] < total:
                    sent[0] += 1 << 16
                    yield b"x" * (1 << 16)
                yield b'"}'

            before = memory_mib(proc.pid)
            start_t = time.perf_counter()
            try:
                content = body() if framing == "chunked" else b'{"query": "' + b"x" * total + b'"}'
                r = httpx.post(url + "/retrieve", content=content, headers={"content-type": "application/json"},
                               timeout=600)
                status, message = r.status_code, r.text[:80]
            except httpx.HTTPError as exc:
                status, message = "error", repr(exc)[:80]
            seconds = time.perf_counter() - start_t
            after = memory_mib(proc.pid)
            rows.append({"code": label, "upload": f"{mb} MB {framing}", "status": status, "seconds": seconds,
                         "client_sent_mb": (sent[0] if framing == "chunked" else total) / 2**20,
                         "rss_before_mib": before["VmRSS"], "rss_after_mib": after["VmRSS"],
                         "peak_mib": after["VmHWM"], "answer": message})
            print(f"{label}: {mb} MB {framing}: {status} in {seconds:.2f} s, RSS {before['VmRSS']:.0f} -> "
                  f"{after['VmRSS']:.0f} MiB (peak {after['VmHWM']:.0f})", flush=True)
    finally:
        stop(proc)
    return rows


# --------------------------------------------------------------------------------- slow bodies


def _half_request(url: str, chunked_framing: bool) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    framing = b"Transfer-Encoding: chunked\r\n\r\n10\r\n{\"query\": \"abcd" if chunked_framing else \
        b"Content-Length: 1000\r\n\r\n{\"query\": \"abcd"
    sock.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + framing)
    return sock


def _probe(url: str, n: int) -> dict:
    import httpx

    times = []
    with httpx.Client(timeout=120) as client:
        for _ in range(n):
            t0 = time.perf_counter()
            ok = client.get(url + "/healthz").status_code == 200
            times.append((time.perf_counter() - t0) * 1000 if ok else float("inf"))
    q = statistics.quantiles(times, n=100, method="inclusive")
    return {"p50_ms": q[49], "p99_ms": q[98], "max_ms": max(times)}


def slow_bodies(index: str, code: str | None, label: str, *, slow: int, probes: int, timeout_s: float) -> list[dict]:
    import httpx

    extra = [] if code else ["--body-timeout-s", str(timeout_s)]
    proc, url, _ = start(index, code, extra)
    rows, socks, stop_load = [], [], threading.Event()
    try:
        rows.append({"code": label, "open slow bodies": 0, "retrieval load": "none", **_probe(url, probes)})
        opened = time.monotonic()
        socks = [_half_request(url, i % 2 == 1) for i in range(slow)]
        rows.append({"code": label, "open slow bodies": slow, "retrieval load": "none", **_probe(url, probes)})

        def load():
            with httpx.Client(timeout=300) as client:
                while not stop_load.is_set():
                    client.post(url + "/retrieve", json={"query": "who designed the bridge?", "budget": 2000})

        workers = [threading.Thread(target=load, daemon=True) for _ in range(4)]
        for w in workers:
            w.start()
        time.sleep(1.0)
        rows.append({"code": label, "open slow bodies": slow, "retrieval load": "4 clients", **_probe(url, probes)})
        stop_load.set()
        for w in workers:
            w.join(300)
        wait = max(timeout_s + 5 - (time.monotonic() - opened), 0)
        time.sleep(wait)  # past the body time-out
        answered = 0
        for sock in socks:
            sock.settimeout(0.5)
            try:
                answered += sock.recv(64).startswith(b"HTTP/1.1 408")
            except OSError:
                pass
        for row in rows:
            row["408 after the time-out"] = f"{answered} of {slow}" if row["open slow bodies"] else ""
        print(f"{label}: {rows}", flush=True)
    finally:
        stop_load.set()
        for sock in socks:
            sock.close()
        stop(proc)
    return rows


# ------------------------------------------------------------------------------------ shutdown


def shutdown(index: str, code: str | None, label: str, *, graceful_s: float, clients: int, queries: int) -> dict:
    import httpx

    proc, url, log = start(index, code, ["--graceful-s", str(graceful_s)])
    texts = [f"who designed the bridge number {i}?" for i in range(queries)]
    first = threading.Event()

    def post(_):
        try:
            r = httpx.post(url + "/retrieve", json={"queries": texts, "budget": 2000, "k": 5}, timeout=600)
            return r.status_code
        except httpx.HTTPError:
            return "closed"
        finally:
            first.set()

    try:
        with ThreadPoolExecutor(clients) as pool:
            answers = pool.map(post, range(clients))
            first.wait(600)
            proc.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            code_ = proc.wait(600)
            exit_s = time.monotonic() - t0
            statuses = Counter(str(a) for a in answers)
    finally:
        stop(proc)
    log.seek(0)
    text = log.read()
    row = {"code": label, "graceful_s": graceful_s, "requests": f"{clients} x {queries} queries",
           "statuses": ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())), "n500": statuses.get("500", 0),
           "exit_s": exit_s, "past_grace": f"{exit_s - graceful_s:.2f}" if exit_s > graceful_s else "within it",
           "exit_code": code_,
           "traceback": "Traceback" in text, "invalid_state": "InvalidStateError" in text}
    print(f"{label}: {row}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--before", default=None, help="PYTHONPATH of the code before the fix (its rows are labelled so)")
    ap.add_argument("--before-label", default="before the fix")
    ap.add_argument("--scenarios", default="chunked,slow-bodies,shutdown")
    ap.add_argument("--slow", type=int, default=200)
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--body-timeout-s", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--queries", type=int, default=64)
    ap.add_argument("--graceful-s", type=float, default=1.0)
    ap.add_argument("--within-s", type=float, default=600.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "serve_limits_cpu"))
    args = ap.parse_args()
    codes = ([(args.before, args.before_label)] if args.before else []) + [(None, "this code")]
    scenarios = args.scenarios.split(",")
    record = new_record("each scenario once per code, a fresh server each time; the server and the clients share the machine")
    record["settings"] = vars(args)
    lines_rows = {}
    if "chunked" in scenarios:
        lines_rows["chunked"] = [r for code, label in codes for r in chunked(args.index, code, label)]
    if "slow-bodies" in scenarios:
        lines_rows["slow-bodies"] = [r for code, label in codes for r in slow_bodies(
            args.index, code, label, slow=args.slow, probes=args.probes, timeout_s=args.body_timeout_s)]
    if "shutdown" in scenarios:
        lines_rows["shutdown"] = [shutdown(args.index, code, label, graceful_s=g, clients=args.clients, queries=args.queries)
                                  for code, label in codes for g in (args.graceful_s, args.within_s)]
    record["rows"] = lines_rows
    finish_record(record)
    lines = results_header("`spectrag serve` against hostile bodies and at shutdown (issue 25)", record)
    lines += [f"Index: `{args.index}`. Latencies are measured by the client on a machine other jobs load (the load "
              "averages above): read them as indicative, the statuses and counts as the result.", ""]
    if "chunked" in lines_rows:
        lines += ["## Uploads over the 1 MiB limit", ""]
        lines += md_table(lines_rows["chunked"], [("code", "code", ""), ("upload", "upload", ""), ("status", "status", ""),
                                                  ("seconds", "seconds", ".2f"), ("client had sent MB", "client_sent_mb", ".1f"),
                                                  ("server RSS before MiB", "rss_before_mib", ".0f"),
                                                  ("after MiB", "rss_after_mib", ".0f"), ("peak MiB", "peak_mib", ".0f")])
        lines += [""]
    if "slow-bodies" in lines_rows:
        lines += [f"## `/healthz` with {args.slow} half-sent bodies held open ({args.probes} probes each)", ""]
        lines += md_table(lines_rows["slow-bodies"], [("code", "code", ""), ("open slow bodies", "open slow bodies", "d"),
                                                      ("retrieval load", "retrieval load", ""), ("p50 ms", "p50_ms", ".1f"),
                                                      ("p99 ms", "p99_ms", ".1f"), ("max ms", "max_ms", ".1f"),
                                                      ("408 after the time-out", "408 after the time-out", "")])
        lines += ["", f"This code ran with `--body-timeout-s {args.body_timeout_s:g}`; the code before the fix has no "
                  "body time-out.", ""]
    if "shutdown" in lines_rows:
        lines += ["## SIGTERM with requests open", ""]
        lines += md_table(lines_rows["shutdown"], [("code", "code", ""), ("--graceful-s", "graceful_s", "g"),
                                                   ("requests", "requests", ""), ("statuses", "statuses", ""),
                                                   ("exit s after SIGTERM", "exit_s", ".2f"),
                                                   ("s past the grace period", "past_grace", ""),
                                                   ("traceback in the log", "traceback", ""),
                                                   ("InvalidStateError", "invalid_state", "")])
        lines += ["", "Statuses: `closed` is a connection closed without an answer. The exit time runs from the signal "
                  "to the end of the process."]
    write_results(args.out, lines, record)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
