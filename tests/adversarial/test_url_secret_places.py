"""A secret in places of a URL the first rules did not look at: a path parameter (";api_key=…",
";jsessionid=…"), a token as a path segment (an MCP gateway's "/mcp/sk-…/sse"), a percent-encoded
query or userinfo, a password with a quote in it inside an error message, an IPv6 userinfo, a ws://
URL and a fragment. Whatever is recorded of the URL (safe_url) or of a text naming it (scrub_urls)
never contains the secret; ordinary paths stay readable."""
from __future__ import annotations

import pytest

from core.redaction.endpoints import safe_url, scrub_urls, url_record

SECRET = "s3cr3tTOKENabc123"


@pytest.mark.parametrize("url", [
    f"https://h.example/mcp;api_key={SECRET}",
    f"https://h.example/app;jsessionid={SECRET}/mcp",
    f"https://actions.example/mcp/sk-{SECRET}/sse",
    f"https://h.example/mcp/{SECRET}",
    f"https://h.example/mcp%3Fapi_key%3D{SECRET}",
    f"https://u%3A{SECRET}%40h.example/mcp",
    f"https://u:pa's{SECRET}@h.example/mcp",
    f"https://u:{SECRET}@[::1]:8080/mcp",
    f"ws://u:{SECRET}@h.example/mcp",
    f"wss://h.example/mcp?t={SECRET}",
    f"https://h.example/mcp#{SECRET}",
    f"HTTPS://U:{SECRET}@H.EXAMPLE/",
])
def test_no_secret_in_what_is_recorded_of_a_url(url):
    assert SECRET not in safe_url(url)
    assert SECRET.lower() not in safe_url(url).lower()
    for text in (f"Client error '401 Unauthorized' for url '{url}'", f"could not reach {url}.", f"url={url}",
                 f'{{"url": "{url}"}}'):
        assert SECRET.lower() not in scrub_urls(text).lower(), scrub_urls(text)


@pytest.mark.parametrize("url, shown", [
    ("https://mcp.example.com/mcp", "https://mcp.example.com/mcp"),
    ("https://mcp.example.com/v1/tools/list", "https://mcp.example.com/v1/tools/list"),
    ("http://127.0.0.1:8931/mcp", "http://127.0.0.1:8931/mcp"),
    ("https://shop.example/orders/A202607290001", "https://shop.example/orders/A202607290001"),
])
def test_ordinary_paths_stay_readable(url, shown):
    assert safe_url(url) == shown
    assert url_record(url)["url_rest_digest"] == ""


@pytest.mark.django_db
def test_a_server_with_a_token_in_its_path_leaves_it_out_of_the_trail(requester, operator, client):
    from audit.models import AuditEvent
    from mcp_sources.models import McpServer

    url = f"https://actions.example/mcp/sk-{SECRET}/sse"
    server = McpServer(name="gw", tenant=requester.tenant, transport="http", url=url, owner="Ops <ops@example.com>",
                       timeout_seconds=5)
    server.full_clean()
    server.save()
    server.url = url.replace(SECRET, SECRET[::-1])
    server.save()
    rows = list(AuditEvent.objects.all())
    assert rows
    for row in rows:
        text = str(row.masked_arguments) + row.message
        assert SECRET not in text and SECRET[::-1] not in text, text
    client.force_login(operator)
    for page in ("/admin/mcp_sources/mcpserver/", f"/admin/mcp_sources/mcpserver/{server.pk}/history/",
                 "/admin/audit/auditevent/"):
        body = client.get(page).content.decode()
        assert SECRET not in body and SECRET[::-1] not in body, page
