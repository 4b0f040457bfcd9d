"""Benchmark: a server under edits (``spectrag serve`` following its index, spectrag.serve.follow).

The sample corpus (``engine/sample/corpus``) is indexed with the default model; ``spectrag
serve`` runs on it in a subprocess (127.0.0.1 only, ``--follow-s`` polling); ``--clients``
threads post queries in a loop (the sample questions, hybrid, and the marker words of the pages
added, BM25); meanwhile this process makes ``--edits`` edits through the API, cycling: add a
page with a unique marker word, update a sample page, delete the page added before, and every
fifth edit a compaction. After each edit the set of document ids of the generation it made
current is logged. Counted afterwards:

* errors: answers that are not 200;
* stale answers: an answer of generation g holding a document that g does not hold (deleted
  text served after the swap);
* added pages found: each added page is the top hit for its marker word in every answer of a
  generation that holds it;
* the swaps the server logged ("now serving generation"), and its memory: resident set after
  start-up, the peak (VmHWM) and after the last swap, with the size of one generation in memory
  measured as the resident growth of loading the index in this process.

Usage::

    python bench/bench_living_serve.py --edits 20 --clients 16 --out bench/results/living_serve
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import ensure_spectrag, pin_threads  # noqa: E402  (before numpy: sets thread counts)

_THREADS = pin_threads("1", passive=True)

from _common import ROOT, command_line, load_average, machine_info, machine_line  # noqa: E402

ensure_spectrag()

MARK = "zorblax"


def _rss_mib(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _page(n: int) -> str:
    return f"# Unique page {n}\n\nThe harbour record {MARK}{n} names page {n} and its keeper.\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--edits", type=int, default=20)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--follow-s", type=float, default=0.5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import httpx

    from spectrag import add_documents, build_index, compact_index, delete_documents, load_index, update_documents
    from spectrag.cli.demo import sample_questions

    tmp = Path(tempfile.mkdtemp(prefix="living-serve-"))
    corpus = tmp / "corpus"
    shutil.copytree(ROOT / "engine" / "sample" / "corpus", corpus)
    root = tmp / "idx"
    build_index(corpus, root)
    rss0 = _rss_mib(os.getpid())
    probe = load_index(root)
    one_generation_mib = _rss_mib(os.getpid()) - rss0  # the index's arrays and tables, loaded once more
    docs_of = {probe.generation: sorted({c.doc_id for c in probe.chunks})}
    del probe
    port = _free_port()
    log = (tmp / "server.log").open("w")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    server = subprocess.Popen([sys.executable, "-m", "spectrag", "serve", str(root), "--port", str(port),
                               "--follow-s", str(args.follow_s), "--log-level", "info"],
                              stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 600
    while time.time() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(1)
    rss_start = _rss_mib(server.pid)
    questions = [q["question"] for q in sample_questions()]
    added: dict[str, int] = {}  # doc id -> marker number, for pages added so far
    answers, stop = [], threading.Event()
    lock = threading.Lock()

    def client(j: int) -> None:
        with httpx.Client(timeout=120) as http:
            i = j
            while not stop.is_set():
                i += 1
                with lock:
                    markers = list(added.items())
                if markers and i % 2:
                    doc, n = markers[i % len(markers)]
                    body = {"query": f"{MARK}{n}", "mode": "bm25", "k": 5}
                else:
                    doc, body = None, {"query": questions[i % len(questions)], "mode": "hybrid", "k": 5}
                r = http.post(url + "/v1/retrieve", json=body)
                row = {"status": r.status_code, "marker_doc": doc}
                if r.status_code == 200:
                    data = r.json()
                    row["generation"] = data.get("generation")
                    row["docs"] = [c["doc_id"] for c in data["results"][0]["chunks"]]
                    row["texts"] = [c.get("text", "") for c in data["results"][0]["chunks"]]
                with lock:
                    answers.append(row)

    load0 = load_average()
    threads = [threading.Thread(target=client, args=(j,), daemon=True) for j in range(args.clients)]
    for t in threads:
        t.start()
    time.sleep(5)
    edits, t0 = [], time.time()
    sample_pages = sorted(p.name for p in corpus.iterdir())
    for e in range(args.edits):
        src = tmp / f"edit{e}"
        src.mkdir()
        start = time.time()
        if e % 5 == 4:
            op, index = "compact", compact_index(root)
        elif e % 4 == 0 or not added:
            op = "add"
            (src / f"uniq{e:02d}.md").write_text(_page(e))
            index = add_documents(root, src)
            with lock:
                added[f"uniq{e:02d}.md"] = e
        elif e % 4 == 1:
            op = "update"
            page = sample_pages[e % len(sample_pages)]
            (src / page).write_text((corpus / page).read_text() + f"\n\nEdit {e} appended this sentence.\n")
            index = update_documents(root, src)
        else:
            op = "delete"
            with lock:
                doc = sorted(added)[0]
                added.pop(doc)
            index = delete_documents(root, [doc])
        docs_of[index.generation] = sorted({c.doc_id for c in index.chunks})
        edits.append({"edit": e, "op": op, "generation": index.generation, "seconds": round(time.time() - start, 2)})
        del index
    last_gen = edits[-1]["generation"]
    waited = time.time()
    while httpx.get(url + "/v1/info", timeout=60).json()["index"]["generation"] != last_gen and time.time() - waited < 300:
        time.sleep(0.5)  # the last swap
    swap_wait = time.time() - waited
    time.sleep(5)  # answers on it
    stop.set()
    for t in threads:
        t.join(timeout=180)
    seconds = time.time() - t0
    info = httpx.get(url + "/v1/info").json()
    rss_end, rss_peak = _rss_mib(server.pid), _rss_mib(server.pid, "VmHWM")
    server.terminate()
    server.wait(timeout=120)
    log.close()
    load1 = load_average()
    server_log = (tmp / "server.log").read_text()
    swaps = server_log.count("now serving generation")
    errors = [a for a in answers if a["status"] != 200]
    ok = [a for a in answers if a["status"] == 200]
    stale = [a for a in ok if any(d not in set(docs_of.get(a["generation"], [])) for d in a["docs"])]
    unknown_generation = [a for a in ok if a["generation"] not in docs_of]
    marker = [a for a in ok if a["marker_doc"] and a["marker_doc"] in docs_of.get(a["generation"], [])]
    found = [a for a in marker if a["docs"] and a["docs"][0] == a["marker_doc"]]
    result = {
        "edits": edits, "clients": args.clients, "answers": len(answers), "errors": len(errors),
        "error_examples": [a["status"] for a in errors[:5]], "stale_answers": len(stale),
        "answers_of_unknown_generations": len(unknown_generation),
        "generations_answered": sorted({a["generation"] for a in ok}, key=int),
        "marker_answers_on_a_generation_holding_the_page": len(marker), "added_page_top_hit": len(found),
        "swaps_logged": swaps, "seconds_to_the_last_swap_after_the_last_edit": round(swap_wait, 1),
        "info_generation_at_end": info["index"]["generation"], "last_generation": last_gen,
        "rss_mib": {"server_after_start": round(rss_start, 1), "server_peak": round(rss_peak, 1),
                    "server_at_end": round(rss_end, 1), "one_generation_loaded": round(one_generation_mib, 1)},
        "seconds": round(seconds, 1), "load_average": [load0, load1], "follow_s": args.follow_s,
    }
    print(json.dumps(result, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)
    if args.out:
        Path(args.out + ".json").write_text(json.dumps({"command": command_line(), "machine": machine_line(machine_info()),
                                                        "threads": _THREADS, **result}, indent=1) + "\n")
        r = result["rss_mib"]
        ops = ", ".join(f"{o} {sum(1 for e in edits if e['op'] == o)}" for o in ("add", "update", "delete", "compact"))
        lines = [f"# A server under edits: {args.clients} clients, {len(edits)} edits ({ops})", "",
                 f"`{command_line()}`", "", f"{machine_line(machine_info())}; threads {_THREADS}; load average "
                 f"{load0} -> {load1}; server `--follow-s {args.follow_s}`; {seconds:.0f} s", "",
                 "| answers | errors | stale answers (a document the answering generation lacks) | added page top hit "
                 "| swaps logged | generation at end (last written) |", "|---|---|---|---|---|---|",
                 f"| {len(answers)} | {len(errors)} | {len(stale)} | {len(found)} / {len(marker)} | {swaps} | "
                 f"{info['index']['generation']} ({last_gen}) |", "",
                 f"The last generation was served {swap_wait:.1f} s after the last edit returned; answers came from "
                 f"generations {', '.join(result['generations_answered'])}.", "",
                 f"Server memory (resident MiB): {r['server_after_start']} after start-up, peak {r['server_peak']}, "
                 f"{r['server_at_end']} at the end; one generation of this index loaded in a process: "
                 f"{r['one_generation_loaded']} MiB.", "",
                 "| edit | op | generation | seconds |", "|---|---|---|---|",
                 *(f"| {e['edit']} | {e['op']} | {e['generation']} | {e['seconds']} |" for e in edits), ""]
        Path(args.out + ".md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
