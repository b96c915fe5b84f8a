"""The audit page's filter form: what the query string may ask for, checked, turned into an
audit.trail.TrailFilter. Times are typed and shown in UTC (the trail's zone)."""
from __future__ import annotations

import datetime

from django import forms

from audit.models import AuditEvent
from audit.trail import OUTCOMES, TrailFilter
from tools.display import tool_label
from tools.models import Tool

OUTCOME_CHOICES = [("", "Any outcome / 全部结果"), ("done", "Ran / 已执行"), ("waiting", "Waiting / 等待中"),
                   ("approved", "Confirmed or approved / 已确认或批准"),
                   ("stopped", "Stopped (refused, rejected, expired, failed) / 已终止")]
assert {k for k, _ in OUTCOME_CHOICES if k} == set(OUTCOMES)


def _tool_choices() -> list[tuple[str, str]]:
    names = Tool.objects.order_by("name").values_list("name", flat=True)
    return [("", "Any tool / 全部工具")] + [(name, tool_label(name)) for name in names]


class TrailFilterForm(forms.Form):
    """GET parameters of `/audit/`: tool, decision, outcome, status, actor, since, until, q, setup."""

    q = forms.CharField(required=False, max_length=128, label="Order or object id",
                        help_text="An order id, tracking number, SKU, username, or a run/request/conversation id.")
    tool = forms.ChoiceField(required=False, choices=())
    decision = forms.ChoiceField(required=False, choices=[("", "Any decision / 全部决定")]
                                 + list(AuditEvent.Decision.choices))
    outcome = forms.ChoiceField(required=False, choices=OUTCOME_CHOICES)
    status = forms.CharField(required=False, max_length=64, label="Result code")
    actor = forms.CharField(required=False, max_length=150, label="Who (username)")
    since = forms.DateTimeField(required=False, label="From (UTC)", widget=forms.DateTimeInput(
        format="%Y-%m-%dT%H:%M:%S", attrs={"type": "datetime-local", "step": "1"}), input_formats=["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M",
                                                                     "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"])
    until = forms.DateTimeField(required=False, label="Until (UTC)", widget=forms.DateTimeInput(
        format="%Y-%m-%dT%H:%M:%S", attrs={"type": "datetime-local", "step": "1"}), input_formats=["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M",
                                                                     "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"])
    setup = forms.BooleanField(required=False, label="Show set-up changes")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["tool"].choices = _tool_choices()

    def clean(self) -> dict:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since >= until:
            self.add_error("until", "Must be after From. / 结束时间须晚于开始时间。")
        return data

    def trail_filter(self) -> TrailFilter:
        """The checked filter (call after is_valid(); invalid fields are left out)."""
        data = getattr(self, "cleaned_data", {})

        def utc(value: datetime.datetime | None) -> datetime.datetime | None:
            if value is None:
                return None
            return value.replace(tzinfo=datetime.timezone.utc) if value.tzinfo is None else value

        return TrailFilter(tool=data.get("tool") or "", decision=data.get("decision") or "",
                           outcome=data.get("outcome") or "", status=(data.get("status") or "").strip(),
                           actor=(data.get("actor") or "").strip(), since=utc(data.get("since")),
                           until=utc(data.get("until")), search=(data.get("q") or "").strip(),
                           setup=bool(data.get("setup")))
