"""Every metric the Grafana dashboard and the alert rules in docs/monitoring/
use is one GET /metrics exposes."""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from django.db import connection

from agentplatform.ops.metrics import exposition

DOCS = Path(__file__).resolve().parents[2] / "docs" / "monitoring"
NAME = re.compile(r"\bagentplatform_[a-z0-9_]+")


def exposed_names() -> set[str]:
    """Every series name the exposition can carry (counters with _total, histograms' parts)."""
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", exposition().decode(), re.M):
        names.add(name)
        if kind == "counter":
            names.add(name if name.endswith("_total") else f"{name}_total")
        if kind == "histogram":
            names.update({f"{name}_bucket", f"{name}_count", f"{name}_sum"})
    return names


def test_dashboard_and_alerts_use_only_exposed_metrics(db):
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    dashboard_exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    rules = yaml.safe_load((DOCS / "alerts.yaml").read_text())
    alert_exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    used = {name for expr in dashboard_exprs + alert_exprs for name in NAME.findall(expr)}
    assert len(used) >= 20
    missing = used - exposed_names()
    if connection.vendor != "postgresql":
        missing -= {"agentplatform_db_connections"}  # read from pg_stat_activity: PostgreSQL only
    assert not missing, missing
    # the four alerts an operator needs: approvals about to expire, stuck runs, unknown outcomes, model errors
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    assert {"ApprovalsNearExpiry", "RunsStuck", "IdempotencyOutcomeUnknown", "ModelErrorRateHigh"} <= alerts
    # and rubber-stamping: approvals made without opening the facts or within seconds of it
    assert "ApprovalsRubberStamped" in alerts


def test_every_section_37_metric_is_on_the_dashboard():
    text = (DOCS / "grafana-dashboard.json").read_text()
    for name in ("tool_selection_count", "tool_execution_count", "tool_success_rate", "tool_failure_rate",
                 "tool_argument_validation_failure_count", "tool_permission_denied_count",
                 "tool_confirmation_required_count", "tool_confirmation_expired_count", "tool_idempotency_hit_count",
                 "tool_duplicate_execution_prevented_count", "tool_result_size_bytes", "tool_execution_duration_ms",
                 "tool_loop_iteration_count"):
        assert f"agentplatform_{name}" in text, name
