"""GET /metrics with the thirteen tool metrics of `audit.metrics` and the HTTP and Celery basics, restricted."""
from __future__ import annotations

import re

import pytest
from prometheus_client import REGISTRY

from agentplatform.runtime import services
from approvals import expiry
from audit import metrics
from tests.api.conftest import CANCEL_ORDER

SECTION_37 = [
    "tool_selection_count", "tool_execution_count", "tool_success_rate", "tool_failure_rate",
    "tool_argument_validation_failure_count", "tool_permission_denied_count", "tool_confirmation_required_count",
    "tool_confirmation_expired_count", "tool_idempotency_hit_count", "tool_duplicate_execution_prevented_count",
    "tool_result_size_bytes", "tool_execution_duration_ms", "tool_loop_iteration_count",
]


@pytest.fixture(autouse=True)
def _fresh_label_bounds(monkeypatch):
    """Each test starts with no label values seen: the suite creates hundreds of tenants, more than
    METRICS_MAX_LABEL_VALUES, and later ones would count as `_other`."""
    monkeypatch.setattr(metrics, "_seen", {"tool": set(), "tenant": set(), "status": set()})


def sample(name: str, **labels) -> float:
    """Sum of the samples of `name` whose labels include `labels` (0 when none)."""
    total = 0.0
    for family in REGISTRY.collect():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def test_metrics_exposes_the_thirteen_section_37_metrics(client, db):
    body = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    for name in SECTION_37:
        assert re.search(rf"^# TYPE agentplatform_{name}(_total)? (counter|histogram)$", body, re.M), name
    assert "# TYPE agentplatform_tool_execution_duration_ms histogram" in body
    assert "rate(tool_success_rate_total) / rate(tool_execution_count_total)" in body  # HELP says how
    # plus the HTTP basics and the state read from the database
    for name in ("agentplatform_http_requests", "agentplatform_confirmations_expiring_soon",
                 "agentplatform_runs_stuck", "agentplatform_idempotency_outcome_unknown",
                 "agentplatform_runs_finished_recent", "agentplatform_state_up"):
        assert re.search(rf"^# TYPE {name}(_total)? ", body, re.M), name


def test_a_governed_story_moves_the_counters(requester, nobody, settings):
    labels = {"tool": "cancel_order", "tenant": str(requester.tenant_id)}
    before = {name: sample(f"agentplatform_{name}_total", **labels) for name in
              ("tool_selection_count", "tool_execution_count", "tool_success_rate",
               "tool_confirmation_required_count", "tool_idempotency_hit_count",
               "tool_duplicate_execution_prevented_count")}
    duration_before = sample("agentplatform_tool_execution_duration_ms_count", **labels)

    # given: a cancellation that needs the requester's confirmation, confirmed, then asked again
    outcome = services.chat_send(user=requester, message=f"Please cancel order {CANCEL_ORDER} because it is late")
    token = outcome.pending[0].token
    services.chat_send(user=requester, message="ok", conversation_id=outcome.run.conversation_id,
                       confirmation_token=token)
    services.chat_send(user=requester, message=f"Please cancel order {CANCEL_ORDER} because it is late",
                       conversation_id=outcome.run.conversation_id)

    def delta(name: str) -> float:
        return sample(f"agentplatform_{name}_total", **labels) - before[name]

    assert delta("tool_confirmation_required_count") == 1
    assert delta("tool_execution_count") == 1
    assert delta("tool_success_rate") == 1
    assert delta("tool_idempotency_hit_count") == 1
    assert delta("tool_duplicate_execution_prevented_count") == 1
    assert delta("tool_selection_count") >= 3  # proposed, executed on confirmation, repeated
    assert sample("agentplatform_tool_execution_duration_ms_count", **labels) > duration_before
    # labels carry the tool metrics' dimensions: tool, model, tenant, scenario, prompt version
    families = {f.name: f for f in REGISTRY.collect()}
    ours = [s for s in families["agentplatform_tool_execution_count"].samples
            if s.labels["tool"] == "cancel_order" and s.labels["tenant"] == str(requester.tenant_id)
            and s.labels["model"] == settings.LLM_MODEL and s.name.endswith("_total")]
    assert ours and all(set(s.labels) == {"tool", "model", "tenant", "scenario", "prompt_version"} for s in ours)
    assert all(len(s.labels["prompt_version"]) == 8 and s.labels["scenario"] == "-" for s in ours)


def test_permission_denied_and_expiry_are_counted(requester, nobody, settings):
    denied = sample("agentplatform_tool_permission_denied_count_total", tenant=str(nobody.tenant_id))
    with pytest.raises(Exception):
        services.chat_send(user=nobody, message=f"Cancel order {CANCEL_ORDER} because I want to")
    assert sample("agentplatform_tool_permission_denied_count_total", tenant=str(nobody.tenant_id)) == denied + 1

    expired = sample("agentplatform_tool_confirmation_expired_count_total", tool="cancel_order")
    outcome = services.chat_send(user=requester, message=f"Please cancel order {CANCEL_ORDER} because it is late")
    from approvals.models import ConfirmationRequest
    from django.utils import timezone
    import datetime
    ConfirmationRequest.objects.filter(pk=outcome.pending[0].confirmation_id).update(
        expires_at=timezone.now() - datetime.timedelta(seconds=1))
    expiry.confirmations_expire_due()
    assert sample("agentplatform_tool_confirmation_expired_count_total", tool="cancel_order") == expired + 1


def test_label_values_are_bounded(settings):
    settings.METRICS_MAX_LABEL_VALUES = 3
    assert [metrics.bounded("tool", f"t{i}") for i in range(5)] == ["t0", "t1", "t2", "_other", "_other"]
    assert metrics.bounded("tool", "t1") == "t1"


def test_invented_tool_names_share_one_label():
    before = sample("agentplatform_tool_decisions_total", decision="NOT_FOUND")
    metrics.audit_decision(tool_name="made_up_by_the_model_123", decision="NOT_FOUND", status="TOOL_NOT_FOUND",
                           tenant_id=1)
    metrics.tool_finished(tool_name="_unknown", seconds=0.001, result_bytes=10, tenant_id=1)
    assert sample("agentplatform_tool_decisions_total", decision="NOT_FOUND") == before + 1
    names = {s.labels.get("tool") for f in REGISTRY.collect() if f.name == "agentplatform_tool_selection_count"
             for s in f.samples}
    assert "made_up_by_the_model_123" not in names and "_unknown" in names


@pytest.mark.parametrize("remote, header, status", [
    ("127.0.0.1", "", 200),  # loopback is allowed by default
    ("10.1.2.3", "", 403),  # another network
    ("10.1.2.3", "Bearer wrong-token-value", 403),
    ("10.1.2.3", "Bearer s3cret-metrics-token", 200),  # the token admits from anywhere
])
def test_metrics_is_restricted_by_network_or_token(client, db, settings, remote, header, status):
    settings.METRICS_TOKEN = "s3cret-metrics-token"
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    assert client.get("/metrics", REMOTE_ADDR=remote, **extra).status_code == status


def test_metrics_can_be_switched_off(client, db, settings):
    settings.METRICS_ENABLED = False
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 404


def _label_values(family: str, label: str) -> set:
    return {s.labels.get(label) for f in REGISTRY.collect() if f.name == family for s in f.samples}


def test_no_label_takes_a_value_the_model_or_an_approver_chose():
    # the decisions counter used to take the raw invented name
    # (a model can put personal data in it) and a new status per edit revision
    metrics.audit_decision(tool_name="lookup_customer_13812345678_liu.yang@example.com", decision="NOT_FOUND",
                           status="TOOL_NOT_FOUND", tenant_id=1)
    for revision in range(1, 4):
        metrics.audit_decision(tool_name="refund_order", decision="EDITED", status=f"REVISION_{revision}",
                               tenant_id=1)

    tools = _label_values("agentplatform_tool_decisions", "tool")
    statuses = _label_values("agentplatform_tool_decisions", "status")
    assert not any("13812345678" in (t or "") for t in tools) and "_unknown" in tools
    assert "REVISION" in statuses and not any((s or "").startswith("REVISION_") for s in statuses)


def test_status_labels_are_bounded(settings):
    settings.METRICS_MAX_LABEL_VALUES = 2
    assert [metrics.bounded("status", s) for s in ("OK", "X1", "X2")] == ["OK", "X1", "_other"]
