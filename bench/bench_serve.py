"""Benchmark: `spectrag serve` under a bounded load on 127.0.0.1, micro-batching on vs off.

Question: how much do concurrent requests gain from being scored as one tensor batch? For each
variant (``on``: the defaults, ``--max-wait-ms 5``; ``off``: ``--no-batching``, every request
scored alone by the same threads; ``on-no-overlap`` / ``off-no-overlap``: the same with
``--no-overlap``, each batch embedded after the one before is scored) a fresh ``spectrag serve INDEX`` process is started on a
free loopback port, warmed up (``--warmup`` requests, untimed), then ``--clients`` concurrent
clients (threads, one keep-alive connection each) send ``--requests`` requests in all, one query
each (the MuSiQue questions in turn), and the run stops by itself. Reported: queries/s over the
timed requests, latency p50 / p95 / p99, errors (any status but 200, or a failed connection:
must be 0), and the server's own batch counters (``GET /info``). Then the server gets SIGTERM
and must exit cleanly (status 0). The variants alternate ``--rounds`` times in one run.
``--setup NAME=ARGS`` (repeatable) adds server settings to compare in the same run, e.g.
``--setup "int8=--embed-backend onnx-int8"``: each round runs every variant with
the default settings, then with each setup, so a drifting machine weighs on all alike.

Usage: ``python bench/bench_serve.py --index DIR [--clients 16] [--requests 400] [--rounds 1]``
(index: ``spectrag index ../shared/data/musique/musique_train_corpus.json -o DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time

from _common import ROOT, finish_record, md_table, new_record, results_header, write_results

QUESTIONS = ROOT.parent / "shared" / "data" / "musique" / "musique_train.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(index: str, port: int, extra: list[str], log, start_timeout: float = 300) -> subprocess.Popen:
    import httpx

    proc = subprocess.Popen(["spectrag", "serve", index, "--host", "127.0.0.1", "--port", str(port),
                             "--log-level", "info", *extra], stdout=subprocess.DEVNULL, stderr=log, text=True)
    deadline = time.monotonic() + start_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}; its log: {log.name}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the server did not come up within {start_timeout:g} s")


def _post_httpx(url: str):
    """A keep-alive POST of a JSON body with httpx: ``post(path, body) -> (status, parsed body or text)``."""
    import httpx

    http = httpx.Client(timeout=120)

    def post(path: str, body: dict):
        r = http.post(url + path, json=body)
        return r.status_code, (r.json() if r.status_code == 200 else r.text)

    return post, http.close


def _post_stdlib(url: str):
    """The same with the standard library's ``http.client`` (one keep-alive connection): about a
    third of httpx's CPU per request, which on a 2-core machine is taken from the server."""
    import http.client

    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)

    def post(path: str, body: dict):
        conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        return r.status, (json.loads(data) if r.status == 200 else data[:200].decode(errors="replace"))

    return post, conn.close


CLIENTS = {"stdlib": _post_stdlib, "httpx": _post_httpx}


def load(url: str, questions: list[str], *, clients: int, requests: int, body: dict, client_lib: str = "stdlib") -> dict:
    """``requests`` single-query POSTs from ``clients`` threads, each on one keep-alive connection
    (``client_lib``: ``stdlib``, http.client, or ``httpx``); latencies, errors, wall time."""
    lock, nxt = threading.Lock(), [0]
    latencies: list[float] = []
    errors: list[str] = []

    def client() -> None:
        post, close = CLIENTS[client_lib](url)
        try:
            while True:
                with lock:
                    i = nxt[0]
                    nxt[0] += 1
                if i >= requests:
                    return
                start = time.perf_counter()
                try:
                    status, data = post("/retrieve", {**body, "query": questions[i % len(questions)]})
                    if not (status == 200 and len(data["results"]) == 1):
                        errors.append(f"{status}: {str(data)[:200]}")
                except Exception as exc:  # noqa: BLE001  (a failed connection is an error of the run)
                    errors.append(repr(exc))
                with lock:
                    latencies.append(time.perf_counter() - start)
        finally:
            close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"requests": requests, "wall_s": wall, "qps": requests / wall, "p50_ms": 1000 * q[49],
            "p95_ms": 1000 * q[94], "p99_ms": 1000 * q[98], "mean_ms": 1000 * statistics.fmean(latencies),
            "errors": len(errors), "error_samples": errors[:5]}


def main() -> None:
    import httpx

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--budget", type=int, default=2000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--mode", default="spectral")
    ap.add_argument("--max-wait-ms", type=float, default=5.0)
    ap.add_argument("--variants", default="on,off",
                    help="comma-separated: on (micro-batching), off (one request per call), on-no-overlap and "
                         "off-no-overlap (--no-overlap: a batch is embedded after the one before is scored)")
    ap.add_argument("--start-timeout", type=float, default=300, help="seconds a server may take to come up")
    ap.add_argument("--server-args", default="", help="more arguments for every server, e.g. '--config FILE'")
    ap.add_argument("--setup", action="append", default=[], metavar="NAME=ARGS",
                    help="server arguments to compare with the defaults in the same rounds (repeatable)")
    ap.add_argument("--client", default="stdlib", choices=sorted(CLIENTS),
                    help="the load generator's HTTP client: stdlib (http.client, the lighter) or httpx (earlier runs)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "serve_cpu"))
    args = ap.parse_args()
    if not QUESTIONS.is_file():
        raise SystemExit(f"{QUESTIONS} is absent: this benchmark needs the MuSiQue questions")
    questions = [q["question"] for q in json.loads(QUESTIONS.read_text())]
    body = {"budget": args.budget, "k": args.k, "mode": args.mode}
    setups = {"default": []}
    for item in args.setup:
        name, sep, extra = item.partition("=")
        if not sep or not name or name in setups:
            raise SystemExit(f"--setup {item!r}: expected NAME=ARGS with a new NAME")
        setups[name] = extra.split()
    record = new_record(f"{args.rounds} round(s) of both variants, each a fresh server: {args.warmup} untimed warm-up "
                        f"requests, then {args.requests} timed requests from {args.clients} concurrent clients")
    record["settings"] = vars(args)
    rows = []
    for rnd in range(args.rounds):
        variants = {"on": ["--max-wait-ms", str(args.max_wait_ms)], "off": ["--no-batching"],
                    "on-no-overlap": ["--max-wait-ms", str(args.max_wait_ms), "--no-overlap"],
                    "off-no-overlap": ["--no-batching", "--no-overlap"]}
        # the order of the variants is reversed every other round: the first server of a round
        # must not always be the same variant (a fixed order biases sub-10% differences)
        names = args.variants.split(",")
        runs = [(setup, v) for setup in setups for v in (names if rnd % 2 == 0 else names[::-1])]
        for setup, name in runs:
            extra = [*variants[name], *setups[setup]]
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            log = tempfile.NamedTemporaryFile("w+", prefix="spectrag-serve-", suffix=".log", delete=False)
            server = start_server(args.index, port, [*extra, *args.server_args.split()], log, args.start_timeout)
            try:
                load(url, questions[::-1], clients=args.clients, requests=args.warmup, body=body, client_lib=args.client)
                before = httpx.get(url + "/info").json()["stats"]
                row = {"setup": setup, "batching": name, "round": rnd + 1, **load(url, questions, clients=args.clients,
                                                                  requests=args.requests, body=body,
                                                                  client_lib=args.client)}
                after = httpx.get(url + "/info").json()["stats"]
            finally:
                server.send_signal(signal.SIGTERM)
                code = server.wait(timeout=120)
            log.seek(0)
            text = log.read()
            # uvicorn re-raises the signal after a graceful shutdown: status -15 with these lines is clean
            clean = code in (0, -signal.SIGTERM) and "Application shutdown complete" in text and "Traceback" not in text
            batches = after["batches"] - before["batches"]
            row.update(batches=batches, mean_batch=(after["queries"] - before["queries"]) / max(batches, 1),
                       max_batch=after["max_batch_seen"], exit_code=code, clean_exit=clean)
            print(f"{setup}, batching {name}: {row['qps']:.1f} q/s, p50 {row['p50_ms']:.0f} ms, p99 {row['p99_ms']:.0f} ms, "
                  f"{row['errors']} errors, mean batch {row['mean_batch']:.1f}, exit {code} (clean: {clean})", flush=True)
            rows.append(row)
    def median(setup: str, batching: str) -> float:
        return statistics.median([r["qps"] for r in rows if (r["setup"], r["batching"]) == (setup, batching)] or [float("nan")])

    on, off = median("default", "on"), median("default", "off")
    label = (lambda setup, v: v) if len(setups) == 1 else (lambda setup, v: f"{setup} {v}")
    medians = {label(st, v): median(st, v) for st, v in dict.fromkeys((r["setup"], r["batching"]) for r in rows)}
    by_setup = {st: {"on_off": median(st, "on") / median(st, "off"), "on_vs_default": median(st, "on") / on}
                for st in setups}
    record.update(rows=rows, speedup=on / off, median_qps=medians, setups={k: " ".join(v) for k, v in setups.items()},
                  by_setup=by_setup)
    finish_record(record)
    lines = results_header(f"`spectrag serve` under load: micro-batching on vs off ({args.clients} clients, "
                           f"mode {args.mode}, budget {args.budget}, k {args.k})", record)
    columns = [("setup", "setup", "")] if len(setups) > 1 else []
    lines += md_table(rows, columns + [("batching", "batching", ""), ("round", "round", "d"), ("queries/s", "qps", ".1f"),
                             ("p50 ms", "p50_ms", ".0f"), ("p95 ms", "p95_ms", ".0f"), ("p99 ms", "p99_ms", ".0f"),
                             ("errors", "errors", "d"), ("batches", "batches", "d"), ("mean batch", "mean_batch", ".1f"),
                             ("largest batch", "max_batch", "d"), ("clean exit on SIGTERM", "clean_exit", "")])
    default_label = " (default settings)" if len(setups) > 1 else ""
    lines += ["", (f"Micro-batched throughput / one request per call{default_label}: **{on / off:.2f}x** (median queries/s per "
                   "variant). " if on == on and off == off else "") +
              f"{sum(r['requests'] for r in rows):,} timed requests, {sum(r['errors'] for r in rows)} errors. "
              "Latency is measured by the client, from sending a request to reading its answer "
              f"(chunk texts included). Index: `{args.index}`; server and clients share the machine. A clean exit: "
              "the server logged a complete shutdown with no traceback (uvicorn then re-raises SIGTERM, status -15). "
              "Median queries/s: " + ", ".join(f"{v} {q:.1f}" for v, q in medians.items()) + "."]
    for st, ratios in list(by_setup.items())[1:]:
        lines += ["", f"Setup `{st}` (`{' '.join(setups[st])}`): micro-batched / one request per call "
                      f"{ratios['on_off']:.2f}x; micro-batched, against the default settings in the same rounds: "
                      f"{ratios['on_vs_default']:.2f}x."]
    write_results(args.out, lines, record)
    if any(r["errors"] or not r["clean_exit"] for r in rows):
        raise SystemExit("errors or an unclean exit: see the table")


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
