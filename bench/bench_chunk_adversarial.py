"""Benchmark: is chunking linear on pathological Markdown? (issue 16: goal 1 MB in under 1 s)

    python bench/bench_chunk_adversarial.py                # 1 MB per case, median of 3
    python bench/bench_chunk_adversarial.py --mb 0.25 --repeats 5

Each case is ``--mb`` MB of one adversarial pattern (the audit's quadratic two, a line of
``# `` and unclosed code fences, and the other patterns that once meant rescanning: paired
fences, many tiny sections, setext rules, unclosed HTML comments, one unbroken run, tables,
multi-byte text), chunked by :func:`spectrag.index.chunk.chunk_document` at the fine preset
(256 / 64 tokens). The reference, measured in the same run, is ``--mb`` MB of ordinary prose
(the bundled sample corpus repeated). For the two audit cases the former patterns are timed
too, on 20 KB and 40 KB only (they are quadratic: doubling the input quadruples the time).
Every case's chunks are checked: exact slices, no text lost, no blank chunk.

Results: ``bench/results/chunk_adversarial_cpu.md`` (and ``.json``).
"""

from __future__ import annotations

import argparse
import re
import time

from _common import ROOT, ensure_spectrag, pin_threads  # noqa: E402

pin_threads("1", passive=True)

from _common import finish_record, md_table, median_seconds, new_record, results_header, write_results  # noqa: E402

ensure_spectrag()
from spectrag.cli.demo import sample_corpus  # noqa: E402
from spectrag.config import PRESETS  # noqa: E402
from spectrag.index.chunk import chunk_document  # noqa: E402
from spectrag.index.load import load_documents  # noqa: E402
from spectrag.types import Document  # noqa: E402
from spectrag.util.tokens import get_encoding  # noqa: E402

PATTERNS = {  # name -> (unit, what); each repeated to the size
    "a line of '# ' (audit)": ("# ", "one line: a heading of 500,000 '#'s"),
    "unclosed fences (audit)": ("```x\n", "200,000 fence openers, none closed"),
    "a deep heading line": ("###### # ", "one line"),
    "paired fences": ("```\n```\n", "125,000 empty code blocks"),
    "tiny sections": ("# h\nA b.\n", "111,000 headings, a word each"),
    "setext rules": ("Title\n===\n", "100,000 setext headings"),
    "unclosed comments": ("<!--", "one comment opener after another"),
    "one run of dots": (".", "one 'sentence' of 10^6 characters"),
    "one long word": ("a", "no space, no punctuation"),
    "table rows": ("|a|b|\n", "one table"),
    "sentences": ("A. ", "333,000 one-letter sentences"),
    "emoji": ("\U0001F600", "4-byte characters"),
}
OLD = {  # the former patterns of the two audit cases (engine/index/chunk.py before issue 16)
    "a line of '# ' (audit)": re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M),
    "unclosed fences (audit)": re.compile(r"^(```|~~~)[^\n]*\n.*?^\1[ \t]*$", re.M | re.S),
}


def make(unit: str, size: int) -> str:
    text = unit * (size // len(unit.encode()) + 1)
    while len(text.encode()) > size:
        text = text[: len(text) - max(1, (len(text.encode()) - size) // 4)]
    return text + ("x" if unit == "# " else "")  # a '# ' line that ends in a word: the audit's worst case


def check(doc: Document, chunks) -> None:
    covered = bytearray(len(doc.text))
    for c in chunks:
        assert c.text == doc.text[c.start : c.end] and c.text.strip(), "bad chunk"
        covered[c.start : c.end] = b"\x01" * (c.end - c.start)
    assert all(covered[i] or ch.isspace() for i, ch in enumerate(doc.text)), "text lost"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=1.0, help="MB per case (default: 1)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "chunk_adversarial_cpu.md"))
    args = ap.parse_args()
    size = int(args.mb * 1_000_000)
    config = PRESETS["fine"]
    record = new_record(f"median of {args.repeats} after one warm-up, one thread, chunk size 256 / overlap 64")
    get_encoding()
    prose = "\n\n".join(d.text for d in load_documents(sample_corpus()))
    prose = (prose * (size // len(prose) + 1))[:size]
    rows = []
    for name, (unit, what) in {"ordinary prose (reference)": ("", "the sample corpus, repeated"), **PATTERNS}.items():
        text = prose if not unit else make(unit, size)
        doc = Document("a.md", "A", text, markup="markdown")
        seconds, chunks = median_seconds(lambda: chunk_document(doc, config), args.repeats)
        check(doc, chunks)
        half = Document("a.md", "A", text[: len(text) // 2], markup="markdown")
        half_seconds, _ = median_seconds(lambda: chunk_document(half, config), args.repeats)
        row = {"case": name, "what": what, "mb": len(text.encode()) / 1e6, "seconds": seconds, "chunks": len(chunks),
               "growth": seconds / max(half_seconds, 1e-9)}
        if name in OLD:
            old = {}
            for kb in (20, 40):
                small = make(unit, kb * 1000)
                t0 = time.perf_counter()
                list(OLD[name].finditer(small))
                old[kb] = time.perf_counter() - t0
            row["old_20kb"], row["old_40kb"] = old[20], old[40]
        rows.append(row)
        print(f"{name:30s} {row['mb']:.2f} MB {seconds:7.3f} s  {len(chunks):6d} chunks", flush=True)
    finish_record(record)
    reference = rows[0]["seconds"]
    for r in rows:
        r["vs_prose"] = r["seconds"] / reference
        r["goal"] = "yes" if r["seconds"] < 1.0 else "no"
    record["rows"] = rows
    lines = results_header("Chunking pathological Markdown (issue 16)", record)
    lines += md_table(rows, [("case", "case", ""), ("input", "what", ""), ("MB", "mb", ".2f"), ("seconds", "seconds", ".3f"),
                             ("x prose", "vs_prose", ".1f"), ("< 1 s", "goal", ""), ("chunks", "chunks", "d"),
                             ("time(size) / time(size / 2)", "growth", ".2f"),
                             ("former pattern alone, 20 KB (s)", "old_20kb", ".2f"),
                             ("former pattern alone, 40 KB (s)", "old_40kb", ".2f")])
    lines += ["", "The growth column is linear at 2 (quadratic: 4). "
              "Every case's chunks were checked: exact slices of the text, no text lost, no blank chunk. "
              "The former patterns are timed on 20 and 40 KB only: their time grows with the square of the input "
              "(the audit measured 29.6 s at 100 KB and 114 s at 200 KB for the '# ' line).",
              "On a loaded machine every figure here grows together; the ratio to prose is the stable one."]
    write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
