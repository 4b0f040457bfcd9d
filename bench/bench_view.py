"""The graph view of an index, written and photographed: `spectrag view` + headless Chromium.

Writes ``<out>.html`` with ``spectrag view INDEX -o ... --query TEXT --budget B`` (timed: load,
query, layout, page), then a screenshot ``<out>.png`` by Debian's ``chromium`` (headless, no GPU,
no network), and the counts and seconds to ``<out>.md`` / ``.json``.

Usage: ``python bench/bench_view.py --index DIR [--query TEXT] [--budget 1000] [--out bench/results/view_musique]``
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from _common import ROOT, finish_record, new_record, results_header, write_results

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--query", default="Who was the editor of the Journal of Mathematical Physics?")
    ap.add_argument("--budget", type=int, default=1000)
    ap.add_argument("--size", default="1400,900")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "view_musique"))
    args = ap.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("chromium is not installed (Debian: apt-get install -y chromium)")
    record = new_record("one run")
    out = Path(args.out)
    html = Path(tempfile.mkdtemp()) / "view.html"
    start = time.perf_counter()
    done = subprocess.run(["spectrag", "view", args.index, "-o", str(html), "--query", args.query, "--budget",
                           str(args.budget)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"spectrag view failed ({done.returncode}): {done.stderr[-2000:]}")
    record["view_seconds"] = time.perf_counter() - start
    record["view_output"] = done.stdout.strip()
    with tempfile.TemporaryDirectory() as profile:
        start = time.perf_counter()
        subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", f"--window-size={args.size}",
                        "--virtual-time-budget=8000", f"--screenshot={out.with_suffix('.png')}", html.as_uri()],
                       capture_output=True, text=True, timeout=300, check=True)
        record["screenshot_seconds"] = time.perf_counter() - start
    from PIL import Image  # Pillow (with matplotlib, the eval extra): a 256-colour PNG stays small

    shot = out.with_suffix(".png")
    Image.open(shot).convert("RGB").quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE).save(
        shot, optimize=True)
    record["html_bytes"] = html.stat().st_size
    finish_record(record)
    lines = results_header("Graph view of the MuSiQue index", record)
    lines += [f"`spectrag view {args.index} -o view.html --query {args.query!r} --budget {args.budget}`: "
              f"{record['view_output']} in {record['view_seconds']:.1f} s (model and index load, the query, the layout "
              f"of every chunk, the page); headless Chromium screenshot in {record['screenshot_seconds']:.1f} s.", "",
              f"![graph view]({out.with_suffix('.png').name})"]
    write_results(out, lines, record)


if __name__ == "__main__":
    main()
