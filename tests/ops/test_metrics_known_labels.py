"""/metrics shows a zero-valued series for every known tool and tenant before any event (known
label sets initialised at the first scrape), and the approval quality metrics count decisions
made without opening the facts or within seconds of it."""
from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from prometheus_client import REGISTRY

from agentplatform.ops import metrics as ops_metrics
from agentplatform.tenancy.models import Tenant
from approvals import approver_actions
from approvals.models import RequestView
from audit import metrics
from core import clock
from tests.approvals.test_decisions import _refund  # noqa: F401 - the same approver-gated refund
from tools.models import Tool


@pytest.fixture(autouse=True)
def _first_scrape(monkeypatch):
    """Each test is a fresh process for this purpose: nothing initialised, no label values seen."""
    monkeypatch.setattr(ops_metrics, "_known", {"done": False})
    monkeypatch.setattr(metrics, "_seen", {"tool": set(), "tenant": set(), "status": set()})


def _series(body: str, name: str, **labels) -> list[float]:
    """Values of the exposition lines of `name` carrying at least `labels`."""
    values = []
    for line in body.splitlines():
        match = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            values.append(float(match.group(2)))
    return values


def test_known_tools_and_tenants_show_zero_before_any_event(client, people):
    # given: a tenant nobody has used yet (its series cannot exist from other tests' events)
    fresh = Tenant.objects.create(slug="initech", name="Initech")
    body = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    tenant = str(fresh.pk)
    for tool in Tool.objects.filter(registered=True, tenant__isnull=True).values_list("name", flat=True):
        for name in ("agentplatform_tool_execution_count_total", "agentplatform_tool_failure_rate_total",
                     "agentplatform_tool_permission_denied_count_total",
                     "agentplatform_tool_confirmation_expired_count_total",
                     "agentplatform_approval_decisions_unviewed_total"):
            assert _series(body, name, tool=tool, tenant=tenant) and set(_series(body, name, tool=tool,
                                                                                   tenant=tenant)) == {0.0}, (name, tool)
        assert _series(body, "agentplatform_approval_decision_seconds_count", tool=tool, tenant=tenant,
                       decision="APPROVE") == [0.0]
        assert _series(body, "agentplatform_tool_execution_duration_ms_count", tool=tool, tenant=tenant) == [0.0]
    # with the process's model and prompt version: the series events will move, not a parallel one
    [line] = [line for line in body.splitlines()
              if line.startswith("agentplatform_tool_execution_count_total{") and f'tenant="{tenant}"' in line
              and 'tool="cancel_order"' in line]
    assert 'prompt_version="-"' not in line and 'scenario="-"' in line
    assert _series(body, "agentplatform_celery_tasks_total", state="SUCCESS")  # registered tasks too


def test_a_tenants_own_remote_tool_is_known_to_that_tenant_only(client, people):
    acme, globex = (Tenant.objects.get(slug=s) for s in ("acme", "globex"))
    Tool.objects.create(name="crm__lookup", source="mcp:crm", tenant=acme, default_risk="LOW", enabled=False,
                        default_policy="NONE")
    body = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert _series(body, "agentplatform_tool_selection_count_total", tool="crm__lookup", tenant=str(acme.pk)) == [0.0]
    assert not _series(body, "agentplatform_tool_selection_count_total", tool="crm__lookup", tenant=str(globex.pk))


def test_before_migrations_the_scrape_answers_and_tries_again_later(client, people, monkeypatch):
    # given: the tools table is not there yet (a fresh database before `migrate`)
    monkeypatch.setattr(Tool._meta, "db_table", "tools_tool_not_migrated_yet")
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200 and ops_metrics._known["done"] is False
    assert Tenant.objects.filter(slug="acme").exists()  # the connection is still usable
    monkeypatch.undo()
    monkeypatch.setattr(ops_metrics, "_known", {"done": False})
    client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert ops_metrics._known["done"] is True


def test_initialising_is_one_query_once_per_process(client, people):
    def selects() -> list[str]:  # the test's own transaction adds a savepoint around it
        return [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]]

    with CaptureQueriesContext(connection) as queries:
        assert ops_metrics.known_series_initialise() is True
    assert len(selects()) == 1
    with CaptureQueriesContext(connection) as queries:
        assert ops_metrics.known_series_initialise() is True
    assert selects() == []


def _sample(name: str, **labels) -> float:
    return sum(s.value for f in REGISTRY.collect() for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_a_decision_without_opening_the_facts_is_counted(requester, approver1, approver2,
                                                         django_capture_on_commit_callbacks):
    labels = {"tool": "refund_order", "tenant": str(requester.tenant_id), "decision": "APPROVE"}
    before = {n: _sample(n, **labels) for n in ("agentplatform_approval_decisions_unviewed_total",
                                                  "agentplatform_approval_decisions_fast_total",
                                                  "agentplatform_approval_decision_seconds_count")}
    _, unread = _refund(requester, amount="10")
    _, read = _refund(requester, amount="11", order="A202607290006")

    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_approve(request_id=unread, approver=approver1)
    RequestView.objects.create(tenant_id=requester.tenant_id, request_id=read, user=approver2, viewed_at=clock.now())
    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_approve(request_id=read, approver=approver2)

    def delta(name):
        return _sample(name, **labels) - before[name]

    assert delta("agentplatform_approval_decision_seconds_count") == 2
    assert delta("agentplatform_approval_decisions_unviewed_total") == 1
    assert delta("agentplatform_approval_decisions_fast_total") == 1  # approved just after opening


def test_a_rolled_back_decision_counts_nothing(requester, approver1, django_capture_on_commit_callbacks):
    labels = {"tool": "refund_order", "tenant": str(requester.tenant_id)}
    before = _sample("agentplatform_approval_decision_seconds_count", **labels)
    _, request_id = _refund(requester, amount="10")
    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_approve(request_id=request_id, approver=approver1)
    with pytest.raises(Exception), django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_approve(request_id=request_id, approver=approver1)  # already decided
    assert _sample("agentplatform_approval_decision_seconds_count", **labels) == before + 1
