"""``write_report``: PNG plots (matplotlib, Agg canvas), an HTML page and a JSON summary.

Every file is written atomically (temporary file + rename, DESIGN invariant 5) with mode 0600,
in a folder created with mode 0700: the report is private (curator-only). The HTML page
links its plots by relative paths, so the folder can be moved as a whole. The page and the JSON
say plainly that the report is computed on private data.
"""

from __future__ import annotations

import html
import io
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpql.evaluate.deps import require
from dpql.evaluate.metrics import Histogram, readable
from dpql.evaluate.report import PRIVATE_WARNING, EvaluationReport
from dpql.io import CURATOR_MODE, atomic_path
from dpql.progress import Progress

REAL, SYNTH = "#1f77b4", "#ff7f0e"


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; the file is mode 0600 (curator-only)."""
    with atomic_path(path, CURATOR_MODE) as tmp:
        tmp.write_bytes(data)


def _figure(width: float, height: float) -> Any:
    """A figure on an explicit Agg canvas: no pyplot, no global backend state."""
    fig = require("matplotlib.figure").Figure(figsize=(width, height), dpi=100)
    require("matplotlib.backends.backend_agg").FigureCanvasAgg(fig)
    return fig


def _png(fig: Any, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    _atomic_write(path, buf.getvalue())


def plot_histogram(h: Histogram, path: Path) -> None:
    """Real and synthetic 1-way distributions of one column as grouped bars."""
    k = len(h.labels)
    fig = _figure(max(4.0, 0.28 * k + 2.0), 3.6)
    ax = fig.add_subplot()
    x = np.arange(k)
    ax.bar(x - 0.2, h.real, 0.4, label="real", color=REAL)
    ax.bar(x + 0.2, h.synthetic, 0.4, label="synthetic", color=SYNTH)
    ax.set_xticks(x, h.labels, rotation=90 if k > 6 else 0, fontsize=7)
    ax.set_ylabel("share of rows")
    ax.set_title(h.column)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _png(fig, path)


def plot_correlations(r: EvaluationReport, path: Path) -> None:
    """Heatmaps of the real and synthetic correlation matrices and of their absolute difference."""
    fig = _figure(16.0, 5.6)
    names = r.correlation_columns
    diff = np.abs(r.correlation_real - r.correlation_synthetic)
    panels = (
        ("real", r.correlation_real, "RdBu_r", -1.0, 1.0),
        ("synthetic", r.correlation_synthetic, "RdBu_r", -1.0, 1.0),
        # own scale: differences are small and would vanish on [0, 1]
        (f"|real - synthetic| (L1 = {r.correlation_l1:.3g})", diff, "Reds", 0.0,
         max(0.05, float(diff.max()))),
    )  # fmt: skip
    for i, (title, m, cmap, vmin, vmax) in enumerate(panels):
        ax = fig.add_subplot(1, 3, i + 1)
        im = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax)
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
        ax.set_yticks(range(len(names)), names if i == 0 else [], fontsize=7)
        ax.set_title(title, fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    _png(fig, path)


def plot_dimension_wise(r: EvaluationReport, path: Path) -> None:
    """DP-auto-GAN's dimension-wise probability and prediction scatter plots (y = x is ideal).

    Colours as in the paper's Fig. 4: blue categorical, green the label, red numeric, brown a
    categorical column the synthetic table collapsed to one category.
    """
    fig = _figure(10.0, 4.8)
    ax = fig.add_subplot(1, 2, 1)
    p = r.dimension_wise_probability
    ax.scatter(p.real, p.synthetic, s=12, color=REAL)
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
    ax.set(xlabel="real share", ylabel="synthetic share",
           title=f"dimension-wise probability (SSE {p.sse:.3g})")  # fmt: skip
    ax = fig.add_subplot(1, 2, 2)
    for d in r.dimension_wise_prediction:
        colour = (
            "brown" if d.column in r.collapsed_columns else "green" if d.column == r.label
            else "red" if d.kind == "numeric" else "blue"
        )  # fmt: skip
        ax.scatter([d.real], [d.synthetic], s=18, color=colour)
        ax.annotate(d.column, (d.real, d.synthetic), fontsize=6)
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
    ax.set(xlabel="trained on real (F1 / R^2)", ylabel="trained on synthetic",
           title="dimension-wise prediction")  # fmt: skip
    fig.tight_layout()
    _png(fig, path)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", name)


def _f(x: float | None) -> str:
    return "n/a" if x is None or not np.isfinite(x) else readable(float(x))


def _table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(v: object) -> str:
        return _f(v) if isinstance(v, float) else html.escape(str(v))

    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _img(src: str, alt: str) -> str:
    return f'<img src="{html.escape(src)}" alt="{html.escape(alt)}">'


def _headline(r: EvaluationReport) -> list[str]:
    h = r.headline
    if h is None:
        return []
    w = h.worst
    return [
        "<h2>Headline</h2>",
        f"<p><strong>Largest 1-way shift from the real table: '{html.escape(w.column)}', total "
        f"variation distance {w.tvd:.3f}</strong> (two random halves of the real table differ "
        f"by {w.scale:.3f} on it); mean over {len(h.columns)} columns {h.mean_tvd:.3f} "
        f"({h.mean_scale:.3f}). TVD is half the L1 distance of two distributions: 0 identical, "
        "1 disjoint. A shift near the halves' distance is within sampling noise.</p>",
    ]


def _tstr(r: EvaluationReport) -> list[str]:
    head = "<h2>Train on synthetic, test on real"
    if not r.tstr:  # no label: say how to get the table instead of an empty one
        return [f"{head}</h2>", f"<p>{html.escape(r.notes[0])}</p>"]
    return [
        f"{head} (label: {html.escape(str(r.label))})</h2>",
        _table(["model", "trained on", "accuracy", "AUC", "F1"],
               [(t.model, who, s.accuracy, s.auc, s.f1) for t in r.tstr
                for who, s in (("real", t.train_on_real), ("synthetic", t.train_on_synthetic))]),
    ]  # fmt: skip


def _correlations(r: EvaluationReport, figures: dict[str, str]) -> list[str]:
    parts = [
        "<h2>Correlations</h2>",
        "<p>Numeric and two-valued columns only: a nominal column's codes have no order.</p>",
    ]
    if "correlation" not in figures:
        return [*parts, "<p>Fewer than two such columns.</p>"]
    return [
        *parts,
        f"<p>L1 difference of the correlation matrices: {_f(r.correlation_l1)}</p>",
        _img(figures["correlation"], "correlation heatmaps"),
    ]


def _gan_metrics(r: EvaluationReport, figures: dict[str, str]) -> list[str]:
    return [
        "<h2>DP-auto-GAN metrics</h2>",
        _img(figures["dimension_wise"], "dimension-wise probability and prediction"),
        _table(["column", "score", "trained on real", "trained on synthetic", "collapsed"],
               [(d.column, "R^2" if d.kind == "numeric" else "F1", d.real, d.synthetic,
                 d.column in r.collapsed_columns) for d in r.dimension_wise_prediction]),
        _table(["column", "JSD", "D_KL^mu", "mu", "synthetic categories"],
               [(d.column, d.jsd, d.kl_mu, d.mu, d.synthetic_categories) for d in r.diversity]),
    ]  # fmt: skip


def render_html(r: EvaluationReport, figures: dict[str, str]) -> str:
    """The report page; ``figures`` maps a figure key to its file name in the same folder."""
    passed = {True: "pass", False: "FAIL", None: "-"}
    parts = [
        f'<div class="private-warning"><strong>{html.escape(PRIVATE_WARNING)}</strong></div>',
        "<h1>dpql evaluation report</h1>",
        *_headline(r),
        _table(["table", "rows"], list(r.rows.items())),
        f"<p>Test set: {html.escape(r.test_set)}</p>",
        "<h2>Workload error</h2>",
        _table(["class", "metric", "queries", "mean", "max"],
               [(c.kind, c.metric, c.count, c.mean, c.max) for c in r.workload]),
        "<h3>Worst queries</h3>",
        _table(["class", "query", "error"],
               [(q.kind, q.description, q.error) for q in r.worst_queries]),
        "<h2>Requirements</h2>",
        _table(["requirement", "statistic", "real", "synthetic", "error", "tolerance", "check"],
               [(c.requirement, c.statistic, c.real, c.synthetic, c.error, c.tolerance,
                 passed[c.passed]) for c in r.requirements])
        if r.requirements else "<p>The spec states no requirements.</p>",
        *_tstr(r),
        *_correlations(r, figures),
        *(_gan_metrics(r, figures) if "dimension_wise" in figures else []),
        "<h2>1-way histograms</h2>",
        *(_img(figures[f"hist:{h.column}"], f"histogram of {h.column}") for h in r.histograms),
        "<h2>Notes</h2>",
        "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in r.notes) + "</ul>",
    ]  # fmt: skip
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}img{max-width:100%}"
        ".private-warning{background:#b00020;color:white;padding:1em;font-size:110%}"
    )
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>dpql evaluation report (PRIVATE)</title><style>{style}</style></head>"
        f"<body>\n{body}\n</body></html>\n"
    )


def write_report(
    report: EvaluationReport, output_dir: str | Path, progress: Progress | None = None
) -> Path:
    """Write ``index.html``, ``summary.json`` and the PNGs into ``output_dir``; return the page."""
    out = Path(output_dir)
    for folder in reversed([out, *out.parents]):  # missing folders: private, mode 0700
        if not folder.exists():
            folder.mkdir(mode=0o700, exist_ok=True)
    figures = {}
    if len(report.correlation_columns) >= 2:
        figures["correlation"] = "correlation.png"
    if report.method in (None, "gan"):  # DP-auto-GAN's own metrics, for its releases
        figures["dimension_wise"] = "dimension_wise.png"
    figures |= {
        f"hist:{h.column}": f"hist_{i:02d}_{_slug(h.column)}.png"
        for i, h in enumerate(report.histograms)
    }
    jobs = [
        (lambda key=key, plot=plot: plot(report, out / figures[key]))
        for key, plot in (("correlation", plot_correlations),
                          ("dimension_wise", plot_dimension_wise))
        if key in figures
    ] + [
        (lambda h=h: plot_histogram(h, out / figures[f"hist:{h.column}"]))
        for h in report.histograms
    ]
    for i, job in enumerate(jobs):
        job()
        if progress:
            progress("plots", i + 1, len(jobs))
    summary = report.to_json() | {"figures": figures}
    _atomic_write(out / "summary.json", json.dumps(summary, indent=2, allow_nan=False).encode())
    page = out / "index.html"
    _atomic_write(page, render_html(report, figures).encode("utf-8"))
    return page
