"""The auditor's pages (/audit/): who may open them, tenant isolation, the search by business
object, set-up rows hidden by default, keyset paging, exports and the stepwise check; an auditor
can read and never decide or change anything."""
from __future__ import annotations

import json
import uuid

import pytest
from django.db.models import Q
from django.urls import reverse

from agentplatform.runtime import services
from agentplatform.runtime.demo.seed import order_id, seed_demo
from agentplatform.web.views import landing_url
from approvals import approver_actions
from approvals.models import ConfirmationRequest
from audit import events
from audit.models import AuditEvent
from audit.verify_export import verify

CANCEL = order_id("acme", "0005")
REFUND = order_id("acme", "0006")


@pytest.fixture
def auditor(people):
    return people["acme"]["auditor"]


@pytest.fixture
def story(requester, approver1, approver2):
    """A cancellation confirmed by the requester and run, repeated (idempotent hit), and a refund
    decided by approvers with a comment: {"conversation", "run", "request"}."""
    first = services.chat_send(user=requester, message=f"Please cancel order {CANCEL} because the customer changed their mind")
    token = first.pending[0].token
    services.chat_send(user=requester, message="I confirm", conversation_id=first.run.conversation_id,
                       confirmation_token=token)
    services.chat_send(user=requester, message=f"Please cancel order {CANCEL} because the customer changed their mind",
                       conversation_id=first.run.conversation_id)
    refund = services.chat_send(user=requester, message=f"Refund order {REFUND} amount 50 because the item arrived damaged")
    request = ConfirmationRequest.objects.get(pk=refund.pending[0].confirmation_id)
    if request.policy == "APPROVERS":
        approver_actions.confirmation_approve(request_id=request.pk, approver=approver1, comment="checked the photos")
    return {"conversation": first.run.conversation_id, "run": first.run.pk, "request": request}


def _rows(html: str) -> int:
    return html.count('data-testid="audit-row"')


def test_the_demo_auditor_is_read_only_and_lands_on_the_trail(auditor, people):
    assert auditor.tenant.slug == "acme" and not auditor.is_staff and not auditor.is_superuser
    assert set(auditor.get_all_permissions()) == {"audit.export_auditevent"}
    assert list(auditor.groups.values_list("name", flat=True)) == ["acme-auditors"]
    assert people["globex"]["auditor"].groups.get().name == "globex-auditors"
    assert landing_url(auditor) == reverse("auditor:trail")
    assert landing_url(people["acme"]["admin"]) != reverse("auditor:trail")  # administrators keep their start
    again = seed_demo()  # idempotent
    assert again["acme"]["auditor"].pk == auditor.pk and auditor.groups.count() == 1


def test_the_auditor_sees_the_audit_link_and_others_do_not(client, auditor, requester):
    client.force_login(auditor)
    assert 'data-testid="nav-audit"' in client.get(reverse("auditor:trail")).content.decode()
    client.force_login(requester)
    assert 'data-testid="nav-audit"' not in client.get(reverse("chat")).content.decode()


@pytest.mark.parametrize("name, args", [("auditor:trail", []), ("auditor:verify", []), ("auditor:export", ["csv"]),
                                        ("auditor:run", [uuid.uuid4()]), ("auditor:conversation", [uuid.uuid4()])])
def test_people_who_are_not_auditors_get_not_found(client, requester, approver1, nobody, name, args):
    assert client.get(reverse(name, args=args)).status_code == 302  # anonymous: sign in first
    for person in (requester, approver1, nobody):
        client.force_login(person)
        assert client.get(reverse(name, args=args)).status_code == 404


def test_an_order_id_finds_every_row_about_that_order(client, auditor, story):
    client.force_login(auditor)
    about = AuditEvent.objects.filter(tenant=auditor.tenant).filter(
        Q(masked_arguments__order_id=CANCEL) | Q(message__contains=CANCEL))
    expected = sorted(about.values_list("chain_seq", flat=True))
    assert len(expected) >= 4  # asked, confirmed, ran, the repeat answered from the first run

    response = client.get(reverse("auditor:trail"), {"q": CANCEL})

    assert sorted(row.event.chain_seq for row in response.context["rows"]) == expected
    assert REFUND not in response.content.decode()


def test_ids_link_to_request_run_and_conversation_and_comments_show(client, auditor, story):
    client.force_login(auditor)
    html = client.get(reverse("auditor:trail")).content.decode()
    assert reverse("auditor:run", args=[story["run"]]) in html
    assert reverse("auditor:conversation", args=[story["conversation"]]) in html
    assert reverse("approvals:detail", args=[story["request"].pk]) in html
    if story["request"].policy == "APPROVERS":
        assert "checked the photos" in html
    assert " UTC</time>" in html and "cancel_order" not in html.split("<tbody>")[1].split("</tbody>")[0].replace(
        "title=", "")  # tool titles, not wire names


def test_set_up_rows_are_hidden_until_asked_for(client, auditor):
    client.force_login(auditor)
    setup = AuditEvent.objects.filter(tenant=auditor.tenant, decision="CONTROL_CHANGE", actor=None, request_id="")
    everything = AuditEvent.objects.filter(tenant=auditor.tenant).count()
    assert setup.exists()
    events.control_change_recorded(tenant_id=auditor.tenant_id, status="CHANGED", actor_id=auditor.pk,
                                   message="a person changed a setting",
                                   masked_arguments={"object": {"type": "user", "id": "acme-nobody"}})

    hidden = client.get(reverse("auditor:trail"), {"q": "acme-nobody"}).content.decode()
    shown = client.get(reverse("auditor:trail"), {"q": "acme-nobody", "setup": "on"}).content.decode()

    assert _rows(hidden) == 1 and "a person changed a setting" in hidden
    assert _rows(shown) == AuditEvent.objects.filter(tenant=auditor.tenant, business_object="acme-nobody").count() > 1
    assert everything > 1


def test_pages_walk_back_by_chain_position(client, auditor):
    client.force_login(auditor)
    for i in range(70):
        events.tool_call_decided(tenant_id=auditor.tenant_id, decision="DENIED", tool_name="cancel_order",
                                 status="PERMISSION_DENIED", masked_arguments={"order_id": f"A2026072{i:05d}"})
    total = AuditEvent.objects.filter(tenant=auditor.tenant).count()
    seen, url, pages = [], reverse("auditor:trail") + "?setup=on", 0
    while url and pages < 10:
        response = client.get(url)
        html = response.content.decode()
        seen += [int(part.split('"')[0]) for part in html.split('data-seq="')[1:]]
        older = response.context["page"].next_before
        url = reverse("auditor:trail") + f"?setup=on&before={older}" if older else None
        pages += 1
    assert seen == sorted(seen, reverse=True) and len(seen) == len(set(seen)) == total and pages >= 2


def test_another_tenants_ids_answer_not_found(client, people, story):
    other = people["globex"]["auditor"]
    client.force_login(other)
    assert client.get(reverse("auditor:run", args=[story["run"]])).status_code == 404
    assert client.get(reverse("auditor:conversation", args=[story["conversation"]])).status_code == 404
    html = client.get(reverse("auditor:trail"), {"q": CANCEL, "setup": "on"}).content.decode()
    assert _rows(html) == 0
    body = b"".join(client.get(reverse("auditor:export", args=["jsonl"]), {"setup": "on"}).streaming_content)
    assert {json.loads(line)["tenant_id"] for line in body.splitlines()} == {other.tenant_id}


def test_transcripts_are_read_only_pages_of_the_tenant(client, auditor, story, requester):
    client.force_login(auditor)
    run_page = client.get(reverse("auditor:run", args=[story["run"]]))
    conversation_page = client.get(reverse("auditor:conversation", args=[story["conversation"]]))
    assert run_page.status_code == conversation_page.status_code == 200
    assert CANCEL in conversation_page.content.decode() and requester.username in run_page.content.decode()
    for page in (run_page, conversation_page):
        assert "<form" not in page.content.decode().split("</header>")[1]  # nothing to submit
    assert client.post(reverse("auditor:run", args=[story["run"]])).status_code == 405


def test_the_auditor_cannot_decide(client, auditor, story, approver2):
    request = story["request"]
    client.force_login(auditor)
    before = (ConfirmationRequest.objects.get(pk=request.pk).status, AuditEvent.objects.count())

    page = client.post(reverse("approvals:approve", args=[request.pk]), {"comment": "looks fine"})
    api = client.post(f"/api/v1/approvals/{request.pk}/approve/", {"comment": "x"}, content_type="application/json")

    assert page.status_code in (403, 404) or page.status_code == 302
    assert api.status_code in (403, 404)
    assert ConfirmationRequest.objects.get(pk=request.pk).status == before[0]
    assert not request.approvals.filter(approver=auditor).exists()


def test_exports_carry_the_chain_and_check_offline(client, auditor, story, tmp_path):
    client.force_login(auditor)
    for kind in ("csv", "jsonl"):
        response = client.get(reverse("auditor:export", args=[kind]), {"setup": "on"})
        assert response.status_code == 200 and response["Content-Disposition"].endswith(f'.{kind}"')
        path = tmp_path / f"t.{kind}"
        path.write_bytes(b"".join(response.streaming_content))
        count, head, gaps, _ = verify(str(path))
        assert count == AuditEvent.objects.filter(tenant=auditor.tenant).count() and gaps == 0
        assert head == AuditEvent.objects.filter(tenant=auditor.tenant).order_by("-chain_seq").first().row_hash


def test_the_api_export_has_the_chain_columns_and_stays_for_auditors(client, auditor, requester, tmp_path):
    client.force_login(requester)
    assert client.get("/api/v1/audit-events/", {"format": "csv"}).status_code == 403
    client.force_login(auditor)
    response = client.get("/api/v1/audit-events/", {"format": "jsonl"})
    path = tmp_path / "api.jsonl"
    path.write_bytes(b"".join(response.streaming_content))
    first = json.loads(path.read_text().splitlines()[0])
    assert {"chain_seq", "prev_hash", "row_hash", "tenant_id", "actor_id", "body_sha256"} <= set(first)
    assert verify(str(path))[0] == AuditEvent.objects.filter(tenant=auditor.tenant).count()


def test_verify_walks_the_whole_chain_for_auditors_only(client, auditor, requester):
    client.force_login(requester)
    assert client.get(reverse("auditor:verify")).status_code == 404
    client.force_login(auditor)
    report = client.get(reverse("auditor:verify"), {"after": 0}).json()
    head = AuditEvent.objects.filter(tenant=auditor.tenant).count()
    assert report == {"checked_through": head, "head_seq": head, "done": True, "ok": True, "problem": "",
                      "bad_seq": None, "head_hash": report["head_hash"]} and len(report["head_hash"]) == 64


def test_demo_changes_names_an_auditor_who_lost_the_trail_and_reset_restores_it(auditor):
    from agentplatform.runtime.demo.seed import demo_changes

    assert demo_changes() == []
    auditor.groups.clear()
    assert "acme-auditor may no longer read the audit trail" in demo_changes()
    seed_demo()  # a second seed keeps what an administrator changed
    assert "acme-auditor may no longer read the audit trail" in demo_changes()
    seed_demo(reset=True)
    assert demo_changes() == [] and auditor.groups.get().name == "acme-auditors"


def test_the_api_finds_every_row_about_an_order(client, auditor, story):
    client.force_login(auditor)
    body = client.get("/api/v1/audit-events/", {"object": CANCEL, "page_size": 500}).json()
    expected = AuditEvent.objects.filter(tenant=auditor.tenant, masked_arguments__order_id=CANCEL).count()
    assert len(body["results"]) == expected >= 4
    assert all(row["masked_arguments"]["order_id"] == CANCEL for row in body["results"])


@pytest.mark.parametrize("query", ["page_size=true", "page_size=0", "cursor=bm90LW91cnM"])
def test_the_api_export_refuses_list_parameters_it_would_ignore(client, auditor, query):
    client.force_login(auditor)
    response = client.get(f"/api/v1/audit-events/?format=csv&{query}")
    assert response.status_code == 400 and response.json()["code"] in ("INVALID_ARGUMENTS", "INVALID_CURSOR")


@pytest.mark.parametrize("after", ["999999", "9" * 30])
def test_verify_refuses_a_position_past_the_head_instead_of_calling_the_chain_broken(client, auditor, after):
    """A position the chain never reached is bad input (400 with a stable code), not a deleted row."""
    client.force_login(auditor)
    response = client.get(reverse("auditor:verify"), {"after": after})
    assert response.status_code == 400 and response.json()["code"] == "INVALID_ARGUMENTS"
    assert client.get(reverse("auditor:verify"), {"after": "-3"}).json()["ok"] is True  # negative reads as 0


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_an_export_with_a_wrong_filter_is_refused_not_widened(client, auditor, story, fmt):
    """A filter the form refuses is not silently dropped from an export (which would then hold
    more rows than asked for): 400 with a stable code, and the page offers no export link."""
    client.force_login(auditor)
    response = client.get(reverse("auditor:export", args=[fmt]), {"since": "last march", "tool": "cancel_order"})
    assert response.status_code == 400 and response.json()["code"] == "INVALID_ARGUMENTS"
    assert "since" in response.json()["errors"]
    page = client.get(reverse("auditor:trail"), {"since": "last march"}).content.decode()
    assert 'data-testid="export-csv"' not in page
    assert 'data-testid="export-csv"' in client.get(reverse("auditor:trail")).content.decode()
