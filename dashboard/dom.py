"""What a test or a screenshot reads from a dashboard page's DOM (dashboard/browser.py loads it).

`DomSummary` (`read_dom`): the text (scripts and styles left out), whether Streamlit drew an
exception, whether a script run is still going, every Altair chart with its texts, its number of
drawn marks, its axes (Vega's ARIA labels: title and scale kind, and the tick labels), its legends
and the colours of its series (Streamlit draws Vega-Lite as SVG, or on a canvas when a chart has
many data points), every table with the widths the page's layout pass measured (`LAYOUT` in
browser.py), and every text box it found clipped. `layout_problems` lists what does not read
right at 1400 px: a step axis that is not numeric or ticks between steps, several series and no
legend, a faint legend swatch, a table whose columns do not fit, a clipped text box.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}
_VOID |= {"track", "wbr", "param"}
_MARKS = {"path", "text", "line", "rect", "circle", "image"}


@dataclass
class Axis:
    """One axis of a chart, as Vega describes it (its ARIA label) and its tick labels."""

    orient: str  # "X" or "Y"
    title: str
    scale: str  # "linear", "discrete" (band, point, ordinal), "time", "log", ...
    labels: list[str] = field(default_factory=list)


@dataclass
class Chart:
    """One Altair chart of a page: its SVG's texts (title, axis labels, legend), the number of
    marks drawn in its data layers (0: an empty chart), its axes, its legends, the kinds of its
    data marks and the colours its lines, points and areas are drawn in (one per series).
    Streamlit draws a chart of many data points on a canvas instead, which shows none of them:
    `canvas` then, and the chart counts as drawn."""

    texts: list[str] = field(default_factory=list)
    marks: int = 0
    canvas: bool = False
    axes: list[Axis] = field(default_factory=list)
    legends: list[str] = field(default_factory=list)  # each legend's ARIA label
    kinds: set[str] = field(default_factory=set)  # "line", "symbol", "rect", "area", ...
    colours: set[str] = field(default_factory=set)  # of the line, symbol and area marks
    swatches: list[str] = field(default_factory=list)  # the legends' symbol colours
    heading: str = ""  # the chart's own title, if it has one

    @property
    def drawn(self) -> bool:
        return self.marks > 0 or self.canvas

    @property
    def title(self) -> str:
        """Its title, else its y axis's, to name it in a message."""
        titles = [a.title for a in self.axes if a.orient == "Y" and a.title]
        return self.heading or (titles[0] if titles else "(untitled)")


@dataclass
class Table:
    """One `st.dataframe` (drawn on a canvas): its column headers, the width its columns take
    and the width it is shown in, and its right edge against the window's width (px; -1 where
    the page's layout pass did not measure it)."""

    headers: list[str] = field(default_factory=list)
    content_px: int = -1
    shown_px: int = -1
    right_px: int = -1
    window_px: int = -1

    @property
    def cut(self) -> bool:
        """Some column lies beyond the table's edge (reached by a sideways scroll only), or the
        table beyond the window's."""
        return self.content_px > self.shown_px + 1 or self.right_px > self.window_px > 0


@dataclass
class DomSummary:
    text: str  # the document's text, scripts and styles left out, whitespace collapsed
    charts: list[Chart]
    exception: bool  # Streamlit drew an exception box (`stException`)
    running: bool  # Streamlit's status widget is up: the script run had not finished
    skeleton: bool = False  # an element still a placeholder (`stSkeleton`: its code loading)
    html: str = ""  # the DOM it was read from, when kept
    tables: list[Table] = field(default_factory=list)
    clipped: list[str] = field(default_factory=list)  # the text of each clipped text box

    def chart_with(self, text: str) -> Chart | None:
        return next((c for c in self.charts if text in c.texts), None)

    def chart_titled(self, title: str) -> Chart | None:
        return next((c for c in self.charts if c.title == title), None)


# The mark kinds a series is drawn with (a heatmap's rects and a chart's texts are not series).
_SERIES_MARKS = {"line": "stroke", "area": "fill", "symbol": "fill"}
_AXIS_LABEL = re.compile(r"^([XY])-axis(?: titled '(.*?)')? for an? (\w+) scale")


def _colour(kind: str, attributes: dict[str, str]) -> str:
    """A series mark's colour: a line's stroke, an area's or a point's fill (a hollow point's
    stroke)."""
    colour = attributes.get(_SERIES_MARKS[kind], "")
    if colour in ("", "none", "transparent") and kind == "symbol":
        colour = attributes.get("stroke", "")
    return "" if colour in ("none", "transparent") else colour.lower()


def _opacity(attributes: dict[str, str]) -> float:
    """How opaque a mark is drawn (its `opacity` times its `fill-opacity`)."""
    try:
        return float(attributes.get("opacity") or 1) * float(attributes.get("fill-opacity") or 1)
    except ValueError:
        return 1.0


def _on_white(colour: str, opacity: float) -> str:
    """The colour a `#rrggbb` mark of `opacity` shows on a white page."""
    if opacity >= 1 or not re.fullmatch(r"#[0-9a-f]{6}", colour):
        return colour
    channels = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(255 - opacity * (255 - c)):02x}" for c in channels)


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.charts: list[Chart] = []
        self.tables: list[Table] = []
        self.clipped: list[str] = []
        self.exception = False
        self.running = False
        self.skeleton = False
        # Open elements: (tag, what it opens: "chart", "marks:<kind>", "axis", "axis-labels",
        # "legend-symbol", "table", "header", "clipped" or "").
        self._open: list[tuple[str, str]] = []
        self._skip = 0

    def _inside(self, role: str) -> str | None:
        """The innermost open element's role that starts with `role`, else None."""
        return next((r for _, r in reversed(self._open) if r.startswith(role)), None)

    def _role(self, tag: str, found: dict[str, str], classes: list[str]) -> str:
        test_id = found.get("data-testid", "")
        if test_id == "stVegaLiteChart":
            self.charts.append(Chart())
            return "chart"
        if test_id == "stDataFrame":
            self.tables.append(_table(found.get("data-mars-table", "")))
            return "table"
        if "data-mars-clipped" in found:
            self.clipped.append("")
            return "clipped"
        if tag == "th" and found.get("role") == "columnheader" and self._inside("table"):
            self.tables[-1].headers.append("")
            return "header"
        if not (self.charts and self._inside("chart")):
            return ""
        return self._chart_role(tag, found, classes)

    def _chart_role(self, tag: str, found: dict[str, str], classes: list[str]) -> str:
        chart = self.charts[-1]
        if tag != "g":
            return ""
        description = found.get("aria-roledescription", "")
        if description == "axis":
            match = _AXIS_LABEL.match(found.get("aria-label", ""))
            if match:
                orient, title, scale = match.groups()
                chart.axes.append(Axis(orient, title or "", scale))
                return "axis"
        if description == "legend":
            chart.legends.append(found.get("aria-label", ""))
        if "role-axis-label" in classes and self._inside("axis"):
            return "axis-labels"
        if "role-title-text" in classes:
            return "title"
        if "role-legend-symbol" in classes:
            return "legend-symbol"
        if "role-mark" in classes:
            kind = next((c[5:] for c in classes if c.startswith("mark-")), "")
            if kind != "group":
                chart.kinds.add(kind)
                return f"marks:{kind}"
        return ""

    def _mark(self, tag: str, found: dict[str, str]) -> None:
        """Count a data mark of the chart being read, its series colour and a legend swatch."""
        if not self.charts or tag not in _MARKS:
            return
        chart = self.charts[-1]
        marks = self._inside("marks:")
        if marks is not None:
            chart.marks += 1
            kind = marks.split(":", 1)[1]
            if kind in _SERIES_MARKS and _colour(kind, found):
                chart.colours.add(_colour(kind, found))
        elif self._inside("legend-symbol") and _colour("symbol", found):
            chart.swatches.append(_on_white(_colour("symbol", found), _opacity(found)))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        test_id = found.get("data-testid", "")
        classes = found.get("class", "").split()
        self.exception |= test_id == "stException" or "stException" in classes
        self.running |= test_id == "stStatusWidget"
        self.skeleton |= test_id == "stSkeleton"
        if tag in ("script", "style"):
            self._skip += 1
        self._mark(tag, found)
        if tag == "canvas" and self._inside("chart") and self.charts:
            self.charts[-1].canvas = True
        if tag in _VOID:
            return
        self._open.append((tag, self._role(tag, found, classes)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._mark(tag, {name: value or "" for name, value in attrs})

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i:]
                break

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.parts.append(data)
        text = data.strip()
        if not text:
            return
        if self._inside("chart") and self.charts:
            self.charts[-1].texts.append(text)
            if self._inside("axis-labels") and self.charts[-1].axes:
                self.charts[-1].axes[-1].labels.append(text)
            if self._inside("title") and not self.charts[-1].heading:
                self.charts[-1].heading = text
        if self._inside("header") and self.tables:
            self.tables[-1].headers[-1] += text
        if self._inside("clipped") and self.clipped:
            self.clipped[-1] = (self.clipped[-1] + " " + text).strip()


def _table(measured: str) -> Table:
    """A table with the widths the layout pass wrote (`LAYOUT`: "content shown right window")."""
    try:
        content, shown, right, window = (int(float(v)) for v in measured.split())
    except ValueError:
        return Table()
    return Table([], content, shown, right, window)


def read_dom(html: str, *, keep: bool = False) -> DomSummary:
    reader = _Reader()
    reader.feed(html)
    reader.close()
    text = " ".join(" ".join(reader.parts).split())
    kept = html if keep else ""
    return DomSummary(
        text,
        reader.charts,
        reader.exception,
        reader.running,
        reader.skeleton,
        kept,
        reader.tables,
        reader.clipped,
    )


def dom_text(html: str) -> str:
    return read_dom(html).text


# Titles of the axes that count steps: such an axis of a chart over steps must be numeric.
STEP_TITLES = ("step", "iteration", "round", "checkpoint_step", "checkpoint")
# The marks of a chart over steps (a heatmap's columns may be its checkpoints, as categories).
_OVER_STEPS = {"line", "area", "symbol"}
MIN_CONTRAST = 3.0  # WCAG's least contrast for graphics, a legend swatch against white


def step_axis_problems(chart: Chart) -> list[str]:
    """A chart over steps whose step axis is not numeric, or ticks between whole steps."""
    if not chart.kinds & _OVER_STEPS:
        return []
    problems = []
    for axis in chart.axes:
        if axis.orient != "X" or axis.title not in STEP_TITLES:
            continue
        if axis.scale != "linear":
            problems.append(f"its {axis.title} axis is {axis.scale}, not numeric")
        elif any(not _whole(label) for label in axis.labels):
            problems.append(f"its {axis.title} axis ticks between steps: {axis.labels}")
    return problems


def _whole(label: str) -> bool:
    try:
        return float(label.replace("\u2212", "-").replace(",", "")).is_integer()
    except ValueError:
        return False


def contrast(colour: str) -> float:
    """WCAG contrast ratio of a `#rrggbb` colour against white (1 for anything else)."""
    if not re.fullmatch(r"#[0-9a-fA-F]{6}", colour):
        return 1.0
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return 1.05 / (luminance + 0.05)


def chart_problems(chart: Chart) -> list[str]:
    """What reads wrong in a drawn chart: a step axis that is not numeric, several series with
    no legend, a legend swatch hard to see on white."""
    problems = step_axis_problems(chart)
    if len(chart.colours) > 1 and not chart.legends:
        problems.append(f"{len(chart.colours)} series and no legend")
    faint = sorted({c for c in chart.swatches if contrast(c) < MIN_CONTRAST})
    if faint:
        problems.append(f"legend swatches barely visible on white: {faint}")
    return [f"chart {chart.title!r}: {p}" for p in problems]


def layout_problems(dom: DomSummary) -> list[str]:
    """Every chart, table and text box of a page that does not read right at the window's width:
    `chart_problems`, a table whose columns do not fit (`Table.cut`), a clipped text box."""
    problems = [p for chart in dom.charts if chart.drawn for p in chart_problems(chart)]
    for table in dom.tables:
        if table.cut:
            problems.append(
                f"table {table.headers[:3]}: {table.content_px} px of columns shown in "
                f"{table.shown_px} px (right edge {table.right_px} of {table.window_px})"
            )
    problems += [f"clipped text box: {text[:80]!r}" for text in dom.clipped]
    return problems
