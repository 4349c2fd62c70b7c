"""A `Figure` as one self-contained HTML page (no script, no external asset): the charts and the
transitions table. Pure."""

from __future__ import annotations

from html import escape

from alertd.plot.model import Figure
from alertd.plot.svg import figure_svg

PAGE_STYLE = """
body{margin:0;padding:16px;font:14px/1.45 system-ui,sans-serif;color:#0f172a;background:#f8fafc}
h1{font-size:18px;margin:0 0 8px}.figure svg{width:100%;height:auto;max-width:1200px;display:block}
table{border-collapse:collapse;margin-top:16px;font-size:13px;background:#fff}
th,td{border:1px solid #e2e8f0;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f1f5f9}.firing{color:#b91c1c;font-weight:600}.pending{color:#b45309}
.resolved,.inactive{color:#15803d}.wrap{overflow-x:auto}
"""


def figure_page(fig: Figure, *, heading: str = "") -> str:
    """The page: a heading, the SVG charts inline, then every transition of the run."""
    rows = []
    for t in fig.transitions:
        labels = dict(t.get("labels") or {})  # type: ignore[call-overload]
        summary = dict(t.get("annotations") or {}).get("summary", "")  # type: ignore[call-overload]
        state = str(t["state"])
        rows.append(
            "<tr>"
            f'<td>{escape(str(t["time"]))}</td><td class="{escape(state)}">{escape(state.upper())}</td>'
            f"<td>{escape(str(t['rule']))}</td><td>{escape(str(labels.get('metric', '')))}</td>"
            f"<td>{escape('' if t['step'] is None else str(t['step']))}</td><td>{escape(str(t['value']))}</td>"
            f"<td>{escape(str(summary))}</td>"
            "</tr>"
        )
    table = (
        '<div class="wrap"><table class="transitions"><thead><tr><th>time</th><th>state</th><th>rule</th>'
        "<th>metric</th><th>step</th><th>value</th><th>summary</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
        if rows
        else "<p>No rule fired or was pending on this run.</p>"
    )
    title = heading or f"alertd: {fig.title}"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{PAGE_STYLE}</style></head><body>"
        f"<h1>{escape(title)}</h1>"
        f'<div class="figure">{figure_svg(fig)}</div>'
        f"{table}</body></html>\n"
    )
