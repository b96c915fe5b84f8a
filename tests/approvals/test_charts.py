"""The SVG bar chart's geometry and its words (approvals.charts): no database."""
from __future__ import annotations

import datetime
import re

from django.template.loader import render_to_string

from approvals.charts import BOTTOM, HEIGHT, TOP, bar_chart

DAY0 = datetime.date(2026, 11, 1)


def _points(values):
    return [(DAY0 + datetime.timedelta(days=i), v) for i, v in enumerate(values)]


def test_bars_are_proportional_and_numbered():
    chart = bar_chart(key="approved", title="Approved per day", points=_points([0, 2, 4, 1]))
    plot = HEIGHT - TOP - BOTTOM
    assert [b.height for b in chart.bars] == [0, plot / 2, plot, plot / 4]
    assert [b.y + b.height for b in chart.bars] == [HEIGHT - BOTTOM] * 4  # all stand on the baseline
    assert [b.label for b in chart.bars] == ["", "2", "4", "1"]
    assert chart.desc == "Approved per day from 2026-11-01 to 2026-11-04 (UTC): 7 in total, most 4 on 2026-11-03."
    assert chart.ticks[-1][1] == "4"


def test_a_level_is_summarised_by_its_latest_value():
    chart = bar_chart(key="waiting", title="Waiting", points=_points([3, 5, 2]), level=True)
    assert chart.desc == "Waiting from 2026-11-01 to 2026-11-03 (UTC): 2 now, most 5 on 2026-11-02."


def test_ninety_narrow_bars_keep_their_numbers_in_titles_only():
    chart = bar_chart(key="expired", title="Expired", points=_points([1] * 90))
    assert all(b.label == "" for b in chart.bars)
    html = render_to_string("approvals/_bar_chart.html", {"chart": chart})
    assert len(re.findall(r"<title>\d{4}-\d\d-\d\d: 1</title>", html)) == 90 and 'data-testid="bar-value"' not in html


def test_the_svg_is_a_named_image_and_escapes_text():
    chart = bar_chart(key="rejected", title="Rejected <b>per</b> day", points=_points([0, 0]))
    html = render_to_string("approvals/_bar_chart.html", {"chart": chart})
    assert 'role="img"' in html and 'aria-labelledby="chart-rejected-title chart-rejected-desc"' in html
    assert "<b>" not in html and "&lt;b&gt;" in html
    assert "0 in total." in chart.desc and all(b.height == 0 for b in chart.bars)
