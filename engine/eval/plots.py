"""PNG plots of an evaluation (matplotlib, imported only here and only when plotting).

``<stem>_recall.png``     Recall@k for k = 1..20, one line per method
``<stem>_groups.png``     Recall@5 per question group (hops, type, ...), grouped bars
``<stem>_ablations.png``  Recall@5 and nDCG@10 of each ablation (with ``--ablations``)
``<stem>_sweep.png``      Recall@5 and nDCG@10 along each swept parameter (with ``--sweep``)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spectrag.errors import SpectragError


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise SpectragError(
            "plots need matplotlib: pip install matplotlib (or pip install -e '.[eval]'); "
            "or pass --no-plots"
        ) from None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def write_plots(out: Path, stem: str, result: dict[str, Any]) -> list[str]:
    plt = _pyplot()
    methods = result["methods"]
    paths = []

    def save(fig, name: str) -> None:
        path = out / f"{stem}_{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(str(path))

    if methods:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for name, m in methods.items():
            curve = m["recall_curve"]
            ax.plot(range(1, len(curve) + 1), [100 * v for v in curve], marker=".", label=name)
        ax.set(xlabel="k (passages)", ylabel="Recall@k (%)", title=f"{result['dataset']['name']}: Recall@k")
        ax.grid(alpha=0.3)
        ax.legend()
        save(fig, "recall")

    groups = result["dataset"]["groups"]
    if methods and groups:
        fig, axes = plt.subplots(1, len(groups), figsize=(6.4 * len(groups), 4.2), squeeze=False)
        for ax, (group, counts) in zip(axes[0], groups.items()):
            values = list(counts)
            width = 0.8 / max(1, len(methods))
            for i, (name, m) in enumerate(methods.items()):
                ys = [100 * m["groups"][group][v]["R@5"] for v in values]
                ax.bar([x + i * width for x in range(len(values))], ys, width, label=name)
            ax.set_xticks([x + 0.4 - width / 2 for x in range(len(values))], [f"{v}\n(n={counts[v]})" for v in values])
            ax.set(ylabel="Recall@5 (%)", title=f"Recall@5 by {group}")
            ax.legend(fontsize="small")
        save(fig, "groups")

    if "ablations" in result:
        rows = result["ablations"]["rows"]
        fig, ax = plt.subplots(figsize=(6.4, 0.45 * len(rows) + 1.5))
        names = list(rows)[::-1]
        y = range(len(names))
        ax.barh([v + 0.2 for v in y], [100 * rows[n]["overall"]["R@5"] for n in names], 0.4, label="R@5")
        ax.barh([v - 0.2 for v in y], [100 * rows[n]["overall"]["nDCG@10"] for n in names], 0.4, label="nDCG@10")
        ax.set_yticks(list(y), names)
        ax.set(xlabel="%", xlim=(0, 100), title=f"Ablations of {result['ablations']['base']}")
        ax.legend(loc="lower right")
        save(fig, "ablations")

    if "sweep" in result:
        sweep = result["sweep"]
        fig, axes = plt.subplots(1, len(sweep), figsize=(3.2 * len(sweep), 3.4), squeeze=False)
        for ax, (param, s) in zip(axes[0], sweep.items()):
            xs = [p["value"] for p in s["points"]]
            for metric in ("R@5", "nDCG@10"):
                ax.plot(xs, [100 * p["overall"][metric] for p in s["points"]], marker="o", label=metric)
            ax.axvline(s["default"], color="grey", ls=":", lw=1)
            lo, hi = ax.get_ylim()  # at least 10 points tall: noise should look like noise
            if hi - lo < 10:
                mid = (hi + lo) / 2
                ax.set_ylim(mid - 5, mid + 5)
            ax.set(xlabel=f"{param} ({s['mode']})", ylabel="%")
            ax.grid(alpha=0.3)
        axes[0][0].legend()
        save(fig, "sweep")
    return paths
