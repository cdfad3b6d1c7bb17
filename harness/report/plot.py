"""quality_vs_size.png: the quality index against graph size, the Pareto frontier marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping


def plot(rep: Mapping[str, Any], path: Path) -> bool:
    """Draw the chart from the report record; False (and no file) when no variant has both figures."""
    pts = [r for r in rep["variants"] if r["graph_bytes"] and isinstance(r["figures"].get("quality_index"), (int, float))]
    if not pts:
        return False
    import matplotlib   # only when there is something to draw: rebuilding a report needs no plotting stack

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    for r in pts:
        x, y = r["graph_bytes"] / 1e6, r["figures"]["quality_index"]
        style = dict(marker="*", s=160, color="tab:green") if r.get("frontier") else \
            dict(marker="o", s=50, color="tab:blue" if r["passed_all_gates"] else "tab:gray")
        ax.scatter([x], [y], zorder=3, **style)
        ax.annotate(f"{r['model']}-{r['dtype']}" + ("" if r["passed_all_gates"] else " (failed)"), (x, y),
                    textcoords="offset points", xytext=(5, 5), fontsize=8)
    front = sorted((r for r in pts if r.get("frontier")), key=lambda r: r["graph_bytes"])
    if len(front) > 1:
        ax.plot([r["graph_bytes"] / 1e6 for r in front], [r["figures"]["quality_index"] for r in front],
                color="tab:green", lw=1, zorder=2)
    ax.set_xlabel("graph size (MB)")
    ax.set_ylabel("quality index (/100, behavior suite)")
    ax.set_title(f"{rep['run']['campaign']['name']}: quality vs size (star: Pareto frontier)"
                 + (" [SCREENING]" if rep["label"] == "screening" else ""), fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png")
    plt.close(fig)
    tmp.replace(path)
    return True
