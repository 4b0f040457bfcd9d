"""Benchmark: batched ``budget_select`` vs the per-query Python ``budget_select_reference``.

    python bench/bench_select.py                         # B in {1,16,256,1024}, P=200, d=384
    python bench/bench_select.py --sizes 1,64 --repeats 1 --threads 2
    python bench/bench_select.py --device cuda --out bench/results/select_cuda.md

Problem (the paper's operating point, section 3.8): pools of P=200 candidates, float32
embeddings of d=384 (all-MiniLM-L6-v2 size), token budget 12,000, chunk lengths uniform in
[50, 400], the engine's selection settings (``dataclasses.asdict(SelectConfig())``, passed to
both as keyword arguments).  Embeddings are clustered (8 centroids per query, within-cluster cosine about 0.6) so the redundancy term
matters; ``clusters`` are those centroid ids, ``docs`` uniform over 30 documents.

Timing: inputs are built outside the timed region; one warm-up call, then the median of
``--repeats`` runs (default 3), synchronised on CUDA.  The reference is run on the same
inputs (on the CPU) up to ``--ref-max-batch`` queries (default 256); for larger B its time is
extrapolated linearly from the per-query time at the largest measured B, and the table says
so.  Both are single-process; torch uses ``--threads`` intra-op threads (default 1: on a small
shared machine more threads than free cores makes OpenMP kernels far slower).  The table also
reports how many queries the two implementations select identically (cosines are float32 in
the batched kernel and float64 in the reference, so a near-tie may rarely flip).
Results: ``results/select_<device type>.md`` / ``.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import dataclasses

from _common import ensure_spectrag, pin_threads

_THREADS = pin_threads("1")

import torch  # noqa: E402

from _common import ROOT, finish_record, median_seconds, new_record, results_header, write_results  # noqa: E402

ensure_spectrag()
from spectrag.config import SelectConfig  # noqa: E402
from spectrag.kernels.select import budget_select  # noqa: E402
from spectrag.reference.select import budget_select_reference  # noqa: E402


def make_inputs(B: int, P: int, d: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    n_clusters = 8
    centroids = torch.randn(B, n_clusters, d, generator=g)
    centroids = centroids / centroids.norm(dim=2, keepdim=True)
    clusters = torch.randint(0, n_clusters, (B, P), generator=g)
    noise = torch.randn(B, P, d, generator=g) / d**0.5
    emb = centroids.gather(1, clusters.unsqueeze(2).expand(B, P, d)) + 0.8 * noise  # (B, P, d)
    emb = emb / emb.norm(dim=2, keepdim=True)
    return dict(
        scores=torch.rand(B, P, generator=g),
        prox=torch.rand(B, P, generator=g),
        tokens=torch.randint(50, 401, (B, P), generator=g),
        mask=torch.ones(B, P, dtype=torch.bool),
        embeddings=emb.contiguous(),
        clusters=clusters,
        docs=torch.randint(0, 30, (B, P), generator=g),
    )



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,16,256,1024", help="comma-separated batch sizes B")
    ap.add_argument("--P", type=int, default=200, help="candidates per query (default: 200)")
    ap.add_argument("--d", type=int, default=384, help="embedding dimension (default: 384)")
    ap.add_argument("--budget", type=int, default=12_000, help="token budget (default: 12000)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per point (default: 3)")
    ap.add_argument("--ref-max-batch", type=int, default=256,
                    help="largest B the reference is timed at (default: 256)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default: 1)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None,
                    help="Markdown output (default: bench/results/select_<device type>.md)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sizes = [int(x) for x in args.sizes.split(",")]
    params = {**dataclasses.asdict(SelectConfig()), "budget": args.budget}  # the engine's selection settings
    out = args.out or str(ROOT / "bench" / "results" / f"select_{device.type}.md")
    record = new_record(f"median of {args.repeats} after one warm-up, synchronized on CUDA; the reference: median of "
                        f"{args.repeats} without a warm-up per B (after one warm-up query)", device=device)
    rows = []
    ref_per_query = None  # seconds per query at the largest measured B
    ref_warm = False
    for B in sizes:
        cpu_inputs = make_inputs(B, args.P, args.d, args.seed + B)
        inputs = {k: v.to(device) for k, v in cpu_inputs.items()}
        t_batch, res = median_seconds(lambda: budget_select(**inputs, **params), args.repeats, device=device)
        res = {k: getattr(res, k) for k in ("order", "phase", "used_tokens")} | {"n_steps": res.n_steps}
        picks = (res["order"] >= 0).sum(1).float()

        if B <= args.ref_max_batch:
            if not ref_warm:  # warm-up: one query (the reference has no per-B state)
                budget_select_reference(**{k: v[:1] for k, v in cpu_inputs.items()}, **params)
                ref_warm = True
            t_ref, ref = median_seconds(
                lambda: budget_select_reference(**cpu_inputs, **params), args.repeats, warmup=False
            )
            ref_per_query = t_ref / B
            K = max(ref.order.shape[1], res["order"].shape[1])
            pad = lambda o: torch.nn.functional.pad(o.cpu(), (0, K - o.shape[1]), value=-1)  # noqa: E731
            same = (pad(ref.order) == pad(res["order"])).all(1)
            match = f"{int(same.sum())}/{B}"
            ref_note = ""
        else:
            if ref_per_query is None:
                raise SystemExit("--ref-max-batch is below every size: nothing to extrapolate from")
            t_ref = ref_per_query * B
            match = "n/a"
            ref_note = " (extrapolated)"
        rows.append(dict(
            B=B, t_batch=t_batch, t_ref=t_ref, ref_note=ref_note, match=match,
            steps=res["n_steps"], picks=float(picks.mean()),
            used=float(res["used_tokens"].double().mean()),
        ))
        r = rows[-1]
        print(
            f"B={B:5d}  batched {t_batch * 1e3:9.1f} ms ({B / t_batch:9.1f} q/s)  "
            f"reference {t_ref:8.2f} s{ref_note} ({B / t_ref:6.2f} q/s)  "
            f"speed-up {t_ref / t_batch:7.1f}x  steps {r['steps']}  match {match}",
            flush=True,
        )

    record.update(params=params, rows=rows)
    finish_record(record)
    lines = results_header(f"Token-budgeted selection: batched `budget_select` vs per-query reference "
                           f"({device.type})", record) + [
        f"Problem: P = {args.P} candidates per query, d = {args.d} (float32 embeddings), budget "
        f"{args.budget:,} tokens, chunk lengths uniform in [50, 400], the engine's `SelectConfig()` settings "
        f"({', '.join(f'{k} {v}' for k, v in params.items() if k != 'budget')}). The reference is timed up to "
        f"B = {args.ref_max_batch} and extrapolated linearly (per query) above that.",
        "",
        "| B | batched (ms) | batched queries/s | reference (s) | reference queries/s | speed-up "
        "| steps | picks/query | tokens used/query | same selection |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['B']} | {r['t_batch'] * 1e3:.1f} | {r['B'] / r['t_batch']:,.1f} "
            f"| {r['t_ref']:.2f}{r['ref_note']} | {r['B'] / r['t_ref']:.2f} "
            f"| {r['t_ref'] / r['t_batch']:,.1f}x | {r['steps']} | {r['picks']:.1f} "
            f"| {r['used']:,.0f} | {r['match']} |"
        )
    print("\n".join(lines))
    write_results(out, lines, record)


if __name__ == "__main__":
    main()
