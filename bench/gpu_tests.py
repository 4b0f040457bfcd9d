"""The ``[cuda]`` cases of the test suite (the ``device`` fixture's cuda run, tests/conftest.py)
with their pass / fail / error / skip counts, for bench/gpu_check.sh. Without CUDA every case
is skipped (the counts say so); a missing optional package skips with its reason.

    python bench/gpu_tests.py [--timeout-s 150] [--out DIR]

Writes ``gpu_tests_<cuda|cpu>.md`` and ``.json`` (counts, failures by name, the pytest tail) in
``--out`` (default ``$OUT``, else bench/results).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: where the device-parametrized tests live (issue 35's list: kernels, expand, propagate,
#: rescore, seed, graph spectrum, pipeline, index dense / lexical, retriever)
FILES = ["tests/kernels", "tests/expand", "tests/propagate", "tests/rescore", "tests/seed",
         "tests/graph/test_spectrum.py", "tests/test_pipeline.py", "tests/index/test_dense.py",
         "tests/index/test_lexical.py", "tests/test_retriever.py"]


def counts(text: str) -> dict[str, int]:
    """pytest's summary line (``3 failed, 10 passed, 2 skipped, 1 error in 4.2s``) as counts."""
    found = {k: 0 for k in ("passed", "failed", "errors", "skipped", "deselected", "xfailed", "xpassed")}
    for line in text.splitlines()[::-1]:
        if re.search(r"\d+ (passed|failed|skipped|deselected|errors?)\b", line) and " in " in line:
            for num, what in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)", line):
                found["errors" if what.startswith("error") else what] = int(num)
            break
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timeout-s", type=float, default=150.0)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("-k", default="cuda", help="pytest -k expression (default: cuda)")
    args = ap.parse_args()
    import torch

    kind = "cuda" if torch.cuda.is_available() else "cpu"
    cmd = [sys.executable, "-m", "pytest", "-q", "-k", args.k, "-p", "no:cacheprovider", "-rfEs", *FILES]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout_s)
        text, rc, timed_out = done.stdout + done.stderr, done.returncode, False
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc, timed_out = None, True
    seconds = time.perf_counter() - t0
    c = counts(text)
    bad = sorted({m for m in re.findall(r"^(?:FAILED|ERROR) (\S+)", text, flags=re.M)})
    skips = sorted(set(re.findall(r"^SKIPPED \[\d+\] [^:]+:\d+: (.*)$", text, flags=re.M)))
    res = dict(kind=kind, command=" ".join(["python -m pytest"] + cmd[3:]), rc=rc, timed_out=timed_out,
               seconds=round(seconds, 1), counts=c, not_passed=bad, skip_reasons=skips[:30],
               loadavg=os.getloadavg(), tail=text.splitlines()[-40:])
    line = ", ".join(f"{v} {k}" for k, v in c.items() if v)
    print(f"[cuda] tests on {kind}: {line or 'nothing ran'} in {seconds:.0f} s" + (" (TIMED OUT)" if timed_out else ""))
    for b in bad:
        print(f"  not passed: {b}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"gpu_tests_{kind}.json").write_text(json.dumps(res, indent=1))
    md = [f"# `[cuda]` tests ({kind})", "", f"Command: `{res['command']}`, {seconds:.0f} s"
          + (", **timed out**" if timed_out else "") + f"; load average {res['loadavg']}.", "",
          f"Counts: {line or 'nothing ran'}." + ("" if kind == "cuda" else " No CUDA here: every cuda case is skipped."), ""]
    if bad:
        md += ["Not passed:", ""] + [f"- `{b}`" for b in bad] + [""]
    if skips:
        md += ["Skip reasons (distinct):", ""] + [f"- {s}" for s in skips[:30]] + [""]
    md += ["```", *res["tail"][-15:], "```"]
    (out / f"gpu_tests_{kind}.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
