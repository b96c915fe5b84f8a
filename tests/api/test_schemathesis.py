"""Schemathesis against the live test server, once per persona: a requester
with pending calls of their own, an approver with a request to decide, an auditor.

Each run is the `st run` command a person would type, pointed at the schema the server serves:
examples, coverage, fuzzing and stateful phases (the schema's links carry real tokens and ids from
one call to the next: a requester's fresh token to confirm/cancel, an approver's listed request to
approve/reject), positive and negative generation, and the checks not_a_server_error,
status_code_conformance and response_schema_conformance. Any finding fails the test with the
command's report. Also checked: negative_data_rejection (what the schema forbids, the server
refuses) and content_type_conformance. Bounded for `make test` (about 1,100 test cases and half a
minute per persona): SCHEMATHESIS_MAX_EXAMPLES (default 5) examples per operation in the fuzzing
phase, at least 40 stateful scenarios; raise it for a longer hunt, set SCHEMATHESIS_SEED to replay a
run, SCHEMATHESIS_CHECKS to choose other checks (e.g. `all`).
"""
from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.core.servers.basehttp import ThreadedWSGIServer
from django.db import connections
from django.test.testcases import LiveServerThread

from agentplatform.runtime import services
from tests.api.conftest import CANCEL_ORDER, REFUND_ORDER, authorization_header
from tests.api.test_schema import ENDPOINTS  # every operation of the schema

MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "5"))
STATEFUL_EXAMPLES = max(40, 4 * MAX_EXAMPLES)  # scenarios: cheap, and where the links pay off
SEED = os.environ.get("SCHEMATHESIS_SEED", "15")
STATEFUL_STEPS = 12  # a chat, its run, a fresh token, a confirmation ... fit in one scenario
CHECKS = os.environ.get("SCHEMATHESIS_CHECKS", ",".join([
    "not_a_server_error", "status_code_conformance", "response_schema_conformance",
    # what the schema forbids, the server refuses; and it answers the media types it documents
    "negative_data_rejection", "content_type_conformance",
]))


class _NoDelayWSGIServer(ThreadedWSGIServer):
    """Django's live server with TCP_NODELAY: on a kept-alive connection (Schemathesis keeps one)
    Nagle's algorithm and delayed ACKs otherwise cost ~40 ms a response."""

    def get_request(self):
        sock, address = super().get_request()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, address


class _LiveServerThread(LiveServerThread):
    server_class = _NoDelayWSGIServer


@pytest.fixture
def api_server(transactional_db, settings):
    """A live server of this test's database on 127.0.0.1 (an in-memory SQLite database is shared
    with the server thread, as pytest-django's live_server does). Yields its base URL."""
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "127.0.0.1"]
    request_log = logging.getLogger("django.request")
    level = request_log.level
    request_log.setLevel(logging.CRITICAL)  # thousands of 4xx answers, a line each
    shared = {c.alias: c for c in connections.all() if c.vendor == "sqlite" and c.is_in_memory_db()}
    for connection in shared.values():
        connection.inc_thread_sharing()
    thread = _LiveServerThread("127.0.0.1", StaticFilesHandler, connections_override=shared, port=0)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait()
    try:
        if thread.error:
            raise thread.error
        yield f"http://127.0.0.1:{thread.port}"
    finally:
        thread.terminate()
        for connection in shared.values():
            connection.dec_thread_sharing()
        request_log.setLevel(level)


def _persona(people, name: str):
    acme = people["acme"]
    if name == "requester":
        # a requester-confirmed call (a token to find through the links) and an approver-gated one
        services.chat_send(user=acme["requester"], message=f"Please cancel order {CANCEL_ORDER} because it is late")
        return acme["requester"]
    if name == "approver":
        services.chat_send(user=acme["requester"], message=f"Refund order {REFUND_ORDER} because it arrived damaged")
        return acme["approver1"]
    auditor = acme["nobody"]  # reads the audit trail and nothing else
    auditor.user_permissions.add(Permission.objects.get(codename="export_auditevent"))
    services.chat_send(user=acme["requester"], message=f"Please cancel order {CANCEL_ORDER} because it is late")
    return auditor


def run_schemathesis(*, base_url: str, authorization: str, report: str) -> subprocess.CompletedProcess:
    """`st run` against `base_url`'s schema; the JSON run report is written to `report`."""
    config = Path(report).with_name("schemathesis.toml")
    config.write_text(f"[phases.stateful]\nmax-steps = {STATEFUL_STEPS}\n\n"
                      f"[phases.stateful.generation]\nmax-examples = {STATEFUL_EXAMPLES}\n")
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run", f"{base_url}/api/schema/?format=json",
        "--header", f"Authorization: {authorization}",
        "--checks", CHECKS, "--mode", "all", "--phases", "examples,coverage,fuzzing,stateful",
        "--max-examples", str(MAX_EXAMPLES), "--seed", SEED, "--workers", "1",
        "--generation-database", "none", "--request-timeout", "30", "--no-color",
        "--report", "json,har", "--report-json-path", report, "--report-har-path", report + ".har",
    ]
    # run in the report's folder: the command keeps a crash cache (.schemathesis/) where it runs
    return subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=config.parent,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8"})


@pytest.mark.parametrize("persona", ["requester", "approver", "auditor"])
def test_schemathesis_finds_nothing(persona, api_server, people, settings, tmp_path):
    # given: a live server whose event streams end quickly, and the persona's data
    settings.API_SSE_MAX_SECONDS = 0.05
    settings.API_SSE_POLL_SECONDS = 0.01
    user = _persona(people, persona)
    # when
    result = run_schemathesis(base_url=api_server, authorization=authorization_header(user),
                              report=str(tmp_path / "report.json"))
    # then: no finding, and the run really exercised every operation
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-15000:]
    report = json.loads((tmp_path / "report.json").read_text())
    cases = report["test_cases"]
    print(f"schemathesis[{persona}]: {cases['generated']} test cases, {cases['with_failures']} with failures, "
          f"{report['operations']['tested']} operations, {report['running_time']:.0f} s")
    assert report["failures"] == [] and cases["with_failures"] == 0 and cases["errored"] == 0
    assert report["operations"]["tested"] == report["operations"]["total"] == len(ENDPOINTS)
    assert cases["generated"] >= 300
