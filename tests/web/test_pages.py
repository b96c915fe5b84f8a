"""The chat page shell, the home redirect and sign-in/out with the product's templates."""
from __future__ import annotations

from django.contrib.staticfiles import finders
from django.urls import reverse

from agentplatform.runtime.demo.seed import DEMO_PASSWORD


def test_home_sends_people_to_sign_in_or_to_the_chat(client, requester):
    assert client.get("/")["Location"] == "/accounts/login/"
    client.force_login(requester)
    assert client.get("/")["Location"] == reverse("chat")


def test_chat_needs_a_signed_in_user(client):
    response = client.get(reverse("chat"))
    assert response.status_code == 302 and response["Location"] == "/accounts/login/?next=/chat/"


def test_chat_page_is_a_shell_for_the_api_with_local_assets_only(client, requester):
    client.force_login(requester)

    response = client.get(reverse("chat"), {"c": "3c1d2a39-6a5e-4a4b-9f43-3c7a3b8b9e10"})

    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-api="/api/v1/"' in html
    assert 'data-conversation-id="3c1d2a39-6a5e-4a4b-9f43-3c7a3b8b9e10"' in html
    assert '<meta name="csrf-token" content="' in html and "csrftoken" in response.cookies
    for asset in ("css/app.css", "js/api.js", "js/turn.js", "js/chat.js", "js/countdown.js", "img/logo.svg"):
        assert f"/static/{asset}" in html
        assert finders.find(asset), asset
    assert "http://" not in html and "https://" not in html  # no CDN, no external font
    assert "acme-requester" in html and "Offline demo planner" in html


def test_sign_in_page_and_sign_in_lands_on_the_chat(client, requester):
    page = client.get(reverse("login"))
    assert page.status_code == 200
    assert "Sign in" in page.content.decode() and "/static/css/app.css" in page.content.decode()

    wrong = client.post(reverse("login"), {"username": "acme-requester", "password": "nope"})
    assert wrong.status_code == 200 and "didn't match" in wrong.content.decode()

    response = client.post(reverse("login"), {"username": "acme-requester", "password": DEMO_PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/chat/"


def test_demo_hint_only_with_the_offline_model(client, settings, db):
    assert "demo-pass-123" in client.get(reverse("login")).content.decode()
    settings.LLM_API_KEY = "sk-real"
    assert "demo-pass-123" not in client.get(reverse("login")).content.decode()


def test_sign_out_is_a_post_and_ends_the_session(client, requester):
    client.force_login(requester)
    assert client.get(reverse("approvals:pending")).status_code == 200

    response = client.post(reverse("logout"))

    assert response.status_code == 302 and response["Location"] == reverse("login")
    assert client.get(reverse("approvals:pending")).status_code == 302
