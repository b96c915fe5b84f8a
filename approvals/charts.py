"""Server-rendered SVG bar charts (no JavaScript, no chart library): the geometry of one chart of
daily counts, drawn by templates/approvals/_bar_chart.html.

Accessible by construction: the <svg> is an image named by its <title> and summarised by its
<desc> (total, latest and busiest day); every bar carries its own <title> ("2026-12-01: 3"), and
each non-zero bar's number is drawn as text above it when bars are wide enough to hold it. The
page shows the same numbers in a table beside the charts.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass

WIDTH, HEIGHT = 480, 190  # the viewBox; the SVG scales to its container (text: 13 units)
LEFT, RIGHT, TOP, BOTTOM = 30, 6, 20, 24  # margins: y labels left, values above, dates below
MIN_LABELLED_BAR = 12.0  # narrower bars (90 days) carry no number text; their <title> still does


@dataclass(frozen=True)
class Bar:
    """One bar in viewBox units; `value` is the day's count, `label` the text drawn above it ("" when
    the bar is too narrow or zero)."""

    x: float
    y: float
    width: float
    height: float
    day: datetime.date
    value: int
    label: str

    @property
    def label_x(self) -> float:
        return round(self.x + self.width / 2, 2)

    @property
    def label_y(self) -> float:
        return round(self.y - 4, 2)


@dataclass(frozen=True)
class BarChart:
    """What the template draws: `key` names the series (CSS class, test id), `title`/`desc` the
    accessible name and summary; `ticks` are [(y, text)] of the value axis, `dates` [(x, text,
    text-anchor)]."""

    key: str
    title: str
    desc: str
    bars: tuple[Bar, ...]
    ticks: tuple[tuple[float, str], ...]
    dates: tuple[tuple[float, str, str], ...]
    width: int = WIDTH
    height: int = HEIGHT
    plot_left: int = LEFT
    plot_right: int = WIDTH - RIGHT
    baseline: int = HEIGHT - BOTTOM


def _summary(title: str, points: list[tuple[datetime.date, int]], *, level: bool) -> str:
    if not points:
        return f"{title}: no days."
    first, last = points[0][0], points[-1][0]
    peak_day, peak = max(points, key=lambda p: (p[1], p[0]))
    span = f"from {first.isoformat()} to {last.isoformat()} (UTC)"
    if level:  # a level (waiting at day's end), not a flow: a total would mean nothing
        return f"{title} {span}: {points[-1][1]} now, most {peak} on {peak_day.isoformat()}."
    total = sum(v for _, v in points)
    busiest = f", most {peak} on {peak_day.isoformat()}" if peak else ""
    return f"{title} {span}: {total} in total{busiest}."


def bar_chart(*, key: str, title: str, points: list[tuple[datetime.date, int]], level: bool = False) -> BarChart:
    """A chart of `points` ([(date, count)], oldest first, counts >= 0). `level`: the counts are
    a level at each day's end (the summary gives the latest value instead of a total)."""
    top = max((v for _, v in points), default=0)
    scale_top = max(top, 1)
    plot_width = WIDTH - LEFT - RIGHT
    plot_height = HEIGHT - TOP - BOTTOM
    slot = plot_width / max(len(points), 1)
    gap = min(2.0, slot * 0.2)
    bars = []
    for i, (day, value) in enumerate(points):
        height = round(plot_height * value / scale_top, 2)
        label = str(value) if value and slot - gap >= MIN_LABELLED_BAR else ""
        bars.append(Bar(x=round(LEFT + i * slot + gap / 2, 2), y=round(HEIGHT - BOTTOM - height, 2),
                        width=round(slot - gap, 2), height=height, day=day, value=value, label=label))
    ticks = ((float(HEIGHT - BOTTOM), "0"), (float(TOP), str(top))) if top else ((float(HEIGHT - BOTTOM), "0"),)
    dates = []
    if points:  # first and last flush with the plot's edges (never clipped), the middle centred
        last = len(points) - 1
        for i in sorted({0, len(points) // 2, last}):
            x, anchor = (LEFT, "start") if i == 0 else (WIDTH - RIGHT, "end") if i == last else (
                round(LEFT + (i + 0.5) * slot, 2), "middle")
            dates.append((x, points[i][0].strftime("%m-%d"), anchor))
    return BarChart(key=key, title=title, desc=_summary(title, points, level=level), bars=tuple(bars),
                    ticks=ticks, dates=tuple(dates))
