"""Benchmark: what do the load-time checks of issues 16 and 25 cost? (cheap enough for every load?)

    python bench/bench_scale.py --n 100000 --index /tmp/spectrag-synth-1e5   # once: the index
    python bench/bench_validate.py --index /tmp/spectrag-synth-1e5

On a built index, times (median of ``--repeats``, warm page cache) the parts of
``spectrag.load_index``: the manifest schema and listing checks, the structural checks of every
stored array (:mod:`spectrag.util.checks`: dtype, shape, CSR row pointers, index ranges,
finiteness) timed from inside (every check call the loaders make, summed), and ``verify=True`` (SHA-256 of every file, the
default). Of the array checks, the value checks of issue 25 (rows L2-normalized, the graphs
symmetric without self-loops, the FAISS vectors equal to the embeddings) are also timed on
their own. The checks are single linear passes over the arrays, so their time scales with the
index's bytes; below 10^6 chunks the 10^6-chunk column is that extrapolation (x 10^6 / n), at
10^6 chunks it is the measurement (``bench/results/validate_cpu_1e6.md``).

Results: ``bench/results/validate_cpu.md`` (and ``.json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from _common import ROOT, ensure_spectrag, pin_threads  # noqa: E402

pin_threads("1", passive=True)

from _common import finish_record, md_table, median_seconds, new_record, results_header, write_results  # noqa: E402

ensure_spectrag()
import spectrag.graph.build as graph_build  # noqa: E402
import spectrag.graph.questions as questions  # noqa: E402
import spectrag.index.dense as dense  # noqa: E402
import spectrag.index.lexical as lexical  # noqa: E402
import spectrag.kg.store as kg_store  # noqa: E402
import spectrag.store as store  # noqa: E402
import spectrag.util.checks as checks  # noqa: E402
from spectrag.manifest import check_listing, check_manifest  # noqa: E402

CHECKS = ("check_csr", "check_floats", "check_ints", "check_indptr", "check_array", "check_strings", "check_symmetric",
          "check_unit_rows", "check_flat_file", "check_flat_vectors")
VALUE_CHECKS = ("check_unit_rows", "check_symmetric", "check_flat_vectors")  # issue 25


def _timed_checks():
    """Wrap the array checks the loaders call with a timer: ``total`` accumulates the outermost
    calls, ``values`` the value checks of issue 25 wherever they are called from (also inside
    ``check_floats``). Returns both (one-element lists) and the undo function."""
    total, values, depth, value_depth, saved = [0.0], [0.0], [0], [0], []
    for module in (store, lexical, graph_build, kg_store, dense, questions, checks):
        for name in CHECKS:
            if hasattr(module, name):
                fn = getattr(module, name)
                saved.append((module, name, fn))

                def timed(*a, _fn=fn, _value=name in VALUE_CHECKS, **k):
                    depth[0] += 1
                    value_depth[0] += _value
                    t0 = time.perf_counter()
                    try:
                        return _fn(*a, **k)
                    finally:
                        depth[0] -= 1
                        value_depth[0] -= _value
                        spent = time.perf_counter() - t0
                        if depth[0] == 0:
                            total[0] += spent
                        if _value and value_depth[0] == 0:
                            values[0] += spent

                setattr(module, name, timed)

    def undo():
        for module, name, fn in saved:
            setattr(module, name, fn)

    return total, values, undo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True, help="a built index (e.g. from bench/bench_scale.py)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "validate_cpu.md"))
    args = ap.parse_args()
    folder = Path(args.index)
    record = new_record(f"median of {args.repeats} after one warm-up (warm page cache), one thread")
    manifest = json.loads((folder / store.MANIFEST).read_text())
    n, total_bytes = manifest["counts"]["chunks"], sum(f["bytes"] for f in manifest["files"].values())
    array_bytes = sum(f["bytes"] for rel, f in manifest["files"].items() if rel.endswith(".npy"))

    def schema():
        check_listing(folder, check_manifest(json.loads((folder / store.MANIFEST).read_text()), "manifest"))

    rows = []
    t_schema, _ = median_seconds(schema, args.repeats)
    t_load, _ = median_seconds(lambda: store.load_index(folder, verify=False), args.repeats)
    spent, value_spent, undo = _timed_checks()
    runs, value_runs = [], []
    try:
        store.load_index(folder, verify=False)  # warm
        for _ in range(args.repeats):
            spent[0] = value_spent[0] = 0.0
            store.load_index(folder, verify=False)
            runs.append(spent[0])
            value_runs.append(value_spent[0])
    finally:
        undo()
    t_arrays, t_values = statistics.median(runs), statistics.median(value_runs)
    t_verify, _ = median_seconds(lambda: store.load_index(folder, verify=True), max(1, args.repeats // 2))

    def parse_only():
        with (folder / store.CHUNKS).open(encoding="utf-8") as fh:
            return [json.loads(line) for line in fh]

    t_parse, _ = median_seconds(parse_only, args.repeats)
    t_chunks, _ = median_seconds(lambda: store.read_chunks(folder / store.CHUNKS, n), args.repeats)
    rate = array_bytes / t_arrays if t_arrays > 0 else float("inf")
    scale = 10.0 ** 6 / n
    for what, sec, extrapolated in (
        ("manifest schema + file listing", t_schema, t_schema * scale),
        ("checks of every stored array, structure and values (timed inside the load)", t_arrays, t_arrays * scale),
        ("  of which the value checks of issue 25 (unit rows, symmetric graphs, FAISS = embeddings)", t_values,
         t_values * scale),
        ("chunk table: json.loads of every line only", t_parse, t_parse * scale),
        ("chunk table: read_chunks (parse, type and slice checks, Chunk records)", t_chunks, t_chunks * scale),
        ("load_index(verify=False), checks included", t_load, t_load * scale),
        ("load_index(verify=True): SHA-256 of every file (the default)", t_verify, t_verify * scale),
    ):
        rows.append({"what": what, "seconds": sec, "at_1e6": extrapolated})
    record.update(index=str(folder), chunks=n, total_bytes=total_bytes, array_bytes=array_bytes,
                  check_rate_gb_s=rate / 1e9, value_check_seconds=t_values, rows=rows)
    finish_record(record)
    lines = results_header("Load-time validation cost (issues 16 and 25)", record)
    lines += [f"Index: `{folder}`, {n:,} chunks, {total_bytes / 1e6:,.0f} MB in its files ({array_bytes / 1e6:,.0f} MB of "
              f".npy arrays).", ""]
    measured = n == 10 ** 6
    lines += md_table(rows, [("part", "what", ""), ("seconds", "seconds", ".3f")] + (
        [] if measured else [("at 10^6 chunks (extrapolated: x 10^6 / n)", "at_1e6", ".2f")]))
    where = "measured here at 10^6 chunks" if measured else "the extrapolation above; not measured at 10^6"
    lines += ["", f"The array checks are {100 * t_arrays / t_load:.1f}% of `load_index(verify=False)` here "
              f"({100 * t_values / t_load:.1f}% the value checks of issue 25). Times on a shared machine move with its "
              "load (see the load averages above): read the shares, not the seconds.",
              "", f"The array checks read {rate / 1e9:.2f} GB/s of arrays here: a linear pass, so an index ten times "
              f"larger takes about ten times as long ({where}). The checksum "
              "verification that `load_index` runs by default reads every byte of every file once more, SHA-256 on "
              "top: the checks cost a fraction of it, and still run with `verify=False` (`spectrag info --no-verify`)."]
    write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
