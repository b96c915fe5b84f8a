"""A wrong Authorization scheme is answered with the scheme the API expects, and the API's errors
do not change with the client's Accept-Language (only the admin follows the person's language)."""
from __future__ import annotations

import pytest

from tests.api.conftest import assert_error

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("header", ["Bearer abcdef0123456789", "Basic dXNlcjpwYXNz", "sk-live-bare-key-1234567890"])
def test_another_scheme_is_401_naming_the_token_scheme(api, requester, header):
    client = api()
    client.credentials(HTTP_AUTHORIZATION=header)

    response = client.get("/api/v1/tools/")

    body = assert_error(response, 401, "NOT_AUTHENTICATED")
    assert response["WWW-Authenticate"] == "Token"
    assert "Authorization: Token <key>" in body["message"]
    assert header.split()[-1] not in body["message"]  # the header's words are never echoed


def test_the_token_scheme_still_authenticates_in_any_letter_case(api, requester):
    client = api(requester)
    token = client._credentials["HTTP_AUTHORIZATION"].split()[1]
    client.credentials(HTTP_AUTHORIZATION=f"token {token}")

    assert client.get("/api/v1/tools/").status_code == 200




def test_api_errors_are_identical_under_accept_language_chinese(api, requester):
    anonymous, signed = api(), api(requester)
    cases = [
        lambda c, h: c.get("/api/v1/tools/", **h),
        lambda c, h: c.post("/api/v1/chat/", data={}, format="json", **h),
        lambda c, h: c.post("/api/v1/chat/", data='{"message": ', content_type="application/json", **h),
        lambda c, h: c.get("/api/v1/no-such-thing/", **h),
        lambda c, h: c.delete("/api/v1/tools/", **h),
        lambda c, h: c.get("/api/v1/runs/00000000-0000-0000-0000-000000000000/", **h),
        lambda c, h: c.post("/api/v1/conversations/", data={"title": ["x"]}, format="json", **h),
    ]
    for index, case in enumerate(cases):
        client = anonymous if index == 0 else signed
        english = case(client, {"HTTP_ACCEPT_LANGUAGE": "en"})
        chinese = case(client, {"HTTP_ACCEPT_LANGUAGE": "zh-Hans,zh;q=0.9"})
        assert english.status_code == chinese.status_code >= 400
        assert english.json() == chinese.json(), (index, english.json(), chinese.json())
        assert "Content-Language" not in chinese or chinese["Content-Language"].startswith("en")
    # a message DRF itself translates (it has a Chinese catalog) stays English on the API
    invalid = signed.post("/api/v1/conversations/", data={"title": ["x"]}, format="json",
                          HTTP_ACCEPT_LANGUAGE="zh-Hans").json()
    assert invalid["code"] == "INVALID_ARGUMENTS" and invalid["errors"] == {"title": ["Not a valid string."]}
