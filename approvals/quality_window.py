"""The window an approval quality report covers: whole UTC days, the last one ending now."""
from __future__ import annotations

import datetime
from dataclasses import dataclass

from core import clock

DEFAULT_DAYS = 30
CHOICES = (7, 30, 90)  # what the overview offers


@dataclass(frozen=True)
class Window:
    """[since, until): `since` is 00:00 UTC of the first day, `until` is now (the last day is
    partial). `days`: the UTC dates covered, oldest first."""

    since: datetime.datetime
    until: datetime.datetime
    days: tuple[datetime.date, ...]

    def day_end(self, day: datetime.date) -> datetime.datetime:
        """The instant a day's counts are taken at: its next midnight, or `until` for today."""
        end = datetime.datetime.combine(day + datetime.timedelta(days=1), datetime.time(), datetime.timezone.utc)
        return min(end, self.until)


def window_last_days(days: int = DEFAULT_DAYS, *, now: datetime.datetime | None = None) -> Window:
    """The last `days` UTC days including today, up to `now` (default: the clock's now). Raises
    ValueError when days is not between 1 and 366."""
    if not 1 <= int(days) <= 366:
        raise ValueError("a window covers 1 to 366 days")
    now = (now or clock.now()).astimezone(datetime.timezone.utc)
    first = now.date() - datetime.timedelta(days=int(days) - 1)
    since = datetime.datetime.combine(first, datetime.time(), datetime.timezone.utc)
    return Window(since=since, until=now, days=tuple(first + datetime.timedelta(days=i) for i in range(int(days))))
