"""The OpenAPI description's text (SPECTACULAR_SETTINGS["DESCRIPTION"]): what a developer needs before
the first call, shown at the top of /api/docs/. Plain Markdown (CommonMark, as Swagger UI renders
it); no imports, so settings can read it before Django is set up."""

GETTING_STARTED = """\
Governed tool calls for LLM agents: chat, runs, confirmations, approvals, audit. The model only
proposes tool calls; the platform decides whether, how and how many times they run.

## Getting started

### 1. Get an API key
- **A person**: sign in to the platform in a browser, then `POST /api/v1/api-keys/` from this page
  (your session authenticates it) — or ask your tenant administrator. The key is shown **once**;
  only its digest is stored. `DELETE /api/v1/api-keys/{id}/` revokes it.
- **A program** (an integration): a tenant administrator creates a *service account* and issues its
  key in the admin (Users → select the account → "Issue API key"). A service account may use
  tools, never approve.

### 2. Send it with the `Token` scheme
```
Authorization: Token <key>
```
Not `Bearer`: any other scheme is answered `401 NOT_AUTHENTICATED` with `WWW-Authenticate: Token`.
Here, press **Authorize** and enter `Token <key>`.

### 3. Retry safely with `Idempotency-Key`
Send `Idempotency-Key: <a fresh UUID>` on `POST /api/v1/chat/` and other writes. Retrying with the
same key and the same body returns the stored answer and runs nothing twice; the same key with a
different body is `422 IDEMPOTENCY_KEY_REUSED`; one still being processed is `409 IN_PROGRESS`
(retryable).

### 4. Long turns: `Prefer: respond-async`
`POST /api/v1/chat/` normally waits for the answer (`200`). With `Prefer: respond-async` it answers
at once `202 Accepted` with `run_id`, `Location` (the run) and `events_url`.

### 5. Follow a run with Server-Sent Events
`GET /api/v1/runs/{run_id}/events/` with `Accept: text/event-stream`: one event per step, in order
(`MODEL_TEXT`, `TOOL_CALL_STARTED`, `CONFIRMATION_REQUIRED`, `TOOL_EXECUTION_COMPLETED`,
`FINAL_TEXT`, `ERROR`, `DONE`), each with `id:` = its sequence number. Reconnect with
`Last-Event-ID` and nothing is missed. `GET /api/v1/runs/{run_id}/` gives the run's state at any time.

### 6. When a call waits for people
A gated tool call answers `pending`: a requester confirms with the token shown once
(`POST /api/v1/confirmations/confirm/`), approvers decide with `POST /api/v1/approvals/{id}/approve/`
or `/reject/`. The run resumes by itself after the decision.

### 7. Errors have one body and stable codes
```
{"code": "CONFIRMATION_EXPIRED", "message": "…", "retryable": false}
```
Program against `code` (stable), show `message` to people, retry only when `retryable` is true
(after `Retry-After` for `429 THROTTLED`). An object of another tenant answers `404`, never `403`.
Each operation below lists the codes it may answer.
"""
