"""The auditor's pages (docs/audit.md): `/audit/` the tenant's trail, its CSV / JSON Lines export
of the current filter, the stepwise chain check, and read-only conversation and run transcripts.
Every view reads; none changes anything (GET only). Tenant and identity come from the session."""
from __future__ import annotations

import uuid

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from agentplatform.web.auditor import transcripts
from agentplatform.web.auditor.access import auditor_required
from agentplatform.web.auditor.filters import TrailFilterForm
from agentplatform.web.auditor.presentation import trail_row
from audit.export import csv_lines, jsonl_lines
from audit.trail import trail_page, trail_rows
from audit.verify_steps import head_seq, verify_step
from core import clock
from core.redaction.text import mask_text

EXPORTS = {"csv": ("text/csv; charset=utf-8", csv_lines), "jsonl": ("application/x-ndjson; charset=utf-8", jsonl_lines)}


def _int(value: str | None) -> int | None:
    try:
        number = int(value or "")
    except ValueError:
        return None
    return number if number > 0 else None


@require_GET
@auditor_required
def trail(request: HttpRequest) -> HttpResponse:
    """`/audit/`: the tenant's trail newest first, filtered (TrailFilterForm), paged by `?before=`
    (a chain position: the next page's link carries it)."""
    form = TrailFilterForm(request.GET or None)
    if form.is_bound:
        form.is_valid()  # a partly wrong filter keeps its valid fields; the form shows the errors
    filters = form.trail_filter()
    page = trail_page(tenant_id=request.user.tenant_id, filters=filters, before=_int(request.GET.get("before")))
    query = request.GET.copy()
    query.pop("before", None)
    return render(request, "auditor/trail.html", {
        "form": form, "page": page, "rows": [trail_row(e) for e in page.rows], "query": query.urlencode(),
        "filtered": any(v for k, v in query.items() if k not in ("setup", "q")),
    })


@require_GET
@auditor_required
def export(request: HttpRequest, fmt: str) -> HttpResponse:
    """`/audit/export.csv` / `.jsonl`: the current filter's rows with the chain columns, streamed
    oldest first (audit.export)."""
    if fmt not in EXPORTS:
        raise Http404("no such format")
    form = TrailFilterForm(request.GET or None)
    if form.is_bound and not form.is_valid():  # a filter left out would export more than was asked for
        return JsonResponse({"code": "INVALID_ARGUMENTS", "message": "the filter is not valid",
                             "retryable": False, "errors": form.errors.get_json_data()}, status=400)
    rows = trail_rows(tenant_id=request.user.tenant_id, filters=form.trail_filter())
    content_type, lines = EXPORTS[fmt]
    response = StreamingHttpResponse(lines(rows), content_type=content_type)
    stamp = clock.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="audit-{request.user.tenant.slug}-{stamp}.{fmt}"'
    response["Cache-Control"] = "no-store"
    return response


@require_GET
@auditor_required
def verify(request: HttpRequest) -> JsonResponse:
    """`/audit/verify/?after=N`: check the next audit.verify_steps.STEP_ROWS rows of the tenant's
    chain after position N (0 to start). JSON {"checked_through", "head_seq", "head_hash", "done", "ok", "problem",
    "bad_seq"}; the page's script calls it until `done`."""
    after = _int(request.GET.get("after")) or 0
    if after > head_seq(tenant_id=request.user.tenant_id):  # no step ends past the head: bad input, not a gap
        return JsonResponse({"code": "INVALID_ARGUMENTS", "message": "after is past the end of the chain",
                             "retryable": False}, status=400, headers={"Cache-Control": "no-store"})
    report = verify_step(tenant_id=request.user.tenant_id, after=after)
    return JsonResponse({"checked_through": report.checked_through, "head_seq": report.head_seq,
                         "head_hash": report.head_hash, "done": report.done, "ok": report.ok,
                         "problem": report.problem, "bad_seq": report.bad_seq},
                        headers={"Cache-Control": "no-store"})


@require_GET
@auditor_required
def conversation(request: HttpRequest, conversation_id: uuid.UUID) -> HttpResponse:
    """`/audit/conversations/<id>/`: a conversation of the auditor's tenant, read-only (404 otherwise)."""
    tenant_id = request.user.tenant_id
    found = transcripts.conversation_for(tenant_id=tenant_id, conversation_id=conversation_id)
    if found is None:
        raise Http404("no such conversation")
    lines, more = transcripts.conversation_lines(found)
    rows = transcripts.audit_rows_about(tenant_id=tenant_id, conversation_id=found.pk)
    return render(request, "auditor/conversation.html", {
        "conversation": found, "lines": lines, "more": more, "runs": transcripts.conversation_runs(found),
        "rows": [trail_row(e) for e in rows]})


@require_GET
@auditor_required
def run(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """`/audit/runs/<id>/`: a run of the auditor's tenant and its events, read-only (404 otherwise)."""
    tenant_id = request.user.tenant_id
    found = transcripts.run_for(tenant_id=tenant_id, run_id=run_id)
    if found is None:
        raise Http404("no such run")
    lines, more = transcripts.run_lines(found)
    rows = transcripts.audit_rows_about(tenant_id=tenant_id, run_id=found.pk)
    return render(request, "auditor/run.html", {"run": found, "lines": lines, "more": more,
                                                "answer": mask_text(found.final_answer),
                                                "rows": [trail_row(e) for e in rows]})
