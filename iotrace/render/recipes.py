"""Terminal, Markdown and figure renderings of the recipe atlas (``iotrace recipes``): a table per card, and a plot
per card of each recipe's decode tok/s against its wall (how close each gets to the bus).

They draw the tables :mod:`iotrace.recipes.atlas` built (DataFrames) and the prediction rows (dicts); every number
was computed there.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["atlas_figure", "atlas_markdown", "predictions_markdown", "print_atlas", "print_predictions"]

# Columns a per-card table leaves out: the card is its heading, the source is listed under it.
_PER_CARD_DROP = ("card", "source")


def _cell(value: Any, column: str = "") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.1f}" if "%" in column or abs(value) >= 100 else f"{value:,.2f}"
    return str(value)


def _md(value: Any, column: str = "") -> str:
    return _cell(value, column).replace("|", "\\|").replace("\n", " ")


def _groups(table: Any) -> list[tuple[str, Any]]:
    return [(str(card), rows) for card, rows in table.groupby("card", sort=False)]


def print_atlas(console: Console, table: Any) -> None:
    """One rich table per card, every column and row; the sources listed under each."""
    if table.empty:
        console.print("no recipe matches")
        return
    for card, rows in _groups(table):
        out = Table(title=f"{escape(card)}: {len(rows)} recipe{'s' if len(rows) != 1 else ''}",
                    title_justify="left")
        columns = [c for c in rows.columns if c not in _PER_CARD_DROP]
        for col in columns:
            out.add_column(col, justify="right" if rows[col].dtype.kind in "if" else "left", overflow="fold")
        for _, row in rows.iterrows():
            out.add_row(*(escape(_cell(row[c], c)) for c in columns))
        console.print(out)
        for source in dict.fromkeys(rows["source"]):
            console.print(f"  source: {escape(str(source))}")


def atlas_markdown(table: Any) -> str:
    """A ``###`` section per card with its recipes' table and sources."""
    if table.empty:
        return "No recipe matches.\n"
    parts = []
    for card, rows in _groups(table):
        columns = [c for c in rows.columns if c not in _PER_CARD_DROP]
        lines = [f"### {card}", "", "| " + " | ".join(columns) + " |",
                 "|" + "|".join("---:" if rows[c].dtype.kind in "if" else "---" for c in columns) + "|"]
        lines += ["| " + " | ".join(_md(row[c], c) for c in columns) + " |" for _, row in rows.iterrows()]
        lines += ["", *(f"- source: {s}" for s in dict.fromkeys(rows["source"])), ""]
        parts.append("\n".join(lines))
    return "\n".join(parts)


def atlas_figure(table: Any) -> Any:
    """A plotly figure, one panel per card: each recipe's decode tok/s (a horizontal bar, numbered so two alike
    recipes stay two bars) and its wall (a red tick); panels are as tall as their recipes need."""
    from plotly.subplots import make_subplots

    decode = table[table["decode tok/s"].notna()]
    groups = _groups(decode)
    counts = [len(rows) for _, rows in groups] or [1]
    fig = make_subplots(rows=len(counts), cols=1, subplot_titles=[card for card, _ in groups],
                        row_heights=[c / sum(counts) for c in counts],
                        vertical_spacing=min(0.08, 0.6 / max(len(counts), 1)))
    for i, (_, rows) in enumerate(groups, start=1):
        labels = [f"{n}. {r['model']} {r['quant']} · {r['engine']} · {r['tests']}" + (f" · {r['load']}" if r["load"]
                  else "") for n, (_, r) in enumerate(rows.iterrows(), start=1)]
        fig.add_bar(y=labels, x=rows["decode tok/s"], orientation="h", name="decode tok/s", marker_color="#4c78a8",
                    showlegend=i == 1, row=i, col=1)
        fig.add_scatter(y=labels, x=rows["decode wall tok/s"], mode="markers", name="decode wall (identity 1)",
                        marker={"symbol": "line-ns-open", "size": 14, "color": "#e45756", "line": {"width": 3}},
                        showlegend=i == 1, row=i, col=1)
        fig.update_yaxes(autorange="reversed", automargin=True, row=i, col=1)
        fig.update_xaxes(title_text="tok/s", rangemode="tozero", row=i, col=1)
    fig.update_layout(title="Decode tok/s of each recipe (bars) against its card's decode wall (red ticks: identity 1)",
                      height=120 + 26 * sum(counts) + 70 * len(counts), width=1100, template="plotly_white",
                      showlegend=False)
    return fig


#: The prediction table's columns: (heading, justify).
_PREDICTION_COLUMNS = (("card", "left"), ("segment", "left"), ("decode wall tok/s", "right"), ("kind", "left"),
                       ("tok/s", "right"), ("interval tok/s", "right"), ("% of wall", "right"), ("basis", "left"))


def _interval(row: dict[str, Any]) -> str:
    """A prediction's lowest to highest rate; one basis row has no spread, and says so."""
    if row["low_tok_s"] is None:
        return "n/a"
    if row["n"] == 1:
        return "one row"
    return f"{_cell(row['low_tok_s'])}\N{EN DASH}{_cell(row['high_tok_s'])}"


def _prediction_cells(row: dict[str, Any]) -> list[str]:
    fraction = None if row["fraction"] is None else 100 * row["fraction"]
    return [row["card"], row["segment"] or "n/a", _cell(row["wall_tok_s"]), row["kind"], _cell(row["tok_s"]),
            _interval(row), _cell(fraction, "%"), row["basis"]]


def print_predictions(console: Console, data: dict[str, Any], title: str) -> None:
    """Every card's wall, its measured or predicted rate with the interval and basis; the method under the table."""
    out = Table(title=escape(title), title_justify="left")
    for col, justify in _PREDICTION_COLUMNS:
        out.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for r in data["cards"]:
        out.add_row(*(escape(c) for c in _prediction_cells(r)))
    console.print(out)
    console.print(f"predicted = {escape(data['method'])}")


def predictions_markdown(data: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(c for c, _ in _PREDICTION_COLUMNS) + " |",
             "|" + "|".join("---:" if j == "right" else "---" for _, j in _PREDICTION_COLUMNS) + "|"]
    lines += ["| " + " | ".join(_md(c) for c in _prediction_cells(r)) + " |" for r in data["cards"]]
    return "\n".join(lines) + f"\n\nPredicted = {data['method']}.\n"
