"""Deployment safety: no key from the repository, refusal to start in production
without SECRET_KEY, `check --deploy` silent with the production settings, CSP, docs behind login."""
from __future__ import annotations

import os
import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from agentplatform import deploy

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {"DEPLOY_ENV": "production", "ALLOWED_HOSTS": "ap.example.com",
              "CSRF_TRUSTED_ORIGINS": "https://ap.example.com"}


def _manage(*args: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    # (DJANGO_ALLOW_ASYNC_UNSAFE is set by the browser tests' Playwright fixture; a deployment never sets it)
    unset = {"SECRET_KEY", "DEPLOY_ENV", "DEBUG", "ALLOWED_HOSTS", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    base = {k: v for k, v in os.environ.items() if k not in unset}
    base.setdefault("DATABASE_URL", f"sqlite:///{tmp_path / 'db.sqlite3'}")
    base["SECRET_KEY_FILE"] = str(tmp_path / "secret_key")
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=120)


def test_check_deploy_prints_no_warning_with_the_production_settings(tmp_path):
    result = _manage("check", "--deploy", "--fail-level", "WARNING",
                     env={**PRODUCTION, "SECRET_KEY": secrets.token_urlsafe(64)}, tmp_path=tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    # The one silenced check is guardian.W001, which looks for guardian's backend by its name; ours
    # subclasses it (agentplatform.tenancy.backends) so that service accounts never hold approve_tool.
    assert result.stdout.strip() == "System check identified no issues (1 silenced)."
    from django.conf import settings
    assert settings.SILENCED_SYSTEM_CHECKS == ["guardian.W001"]
    assert "WARNING" not in result.stderr and "W0" not in result.stderr


@pytest.mark.parametrize("key", ["", "dev-only-insecure-secret-key-change-me-in-production-0123456789", "short"],
                         ids=["missing", "the-repository-key", "too-short"])
def test_production_refuses_to_start_without_a_real_secret_key(tmp_path, key):
    result = _manage("check", env={**PRODUCTION, "SECRET_KEY": key}, tmp_path=tmp_path)

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and "SECRET_KEY" in result.stderr
    assert not (tmp_path / "secret_key").exists()  # production never falls back to a generated key


def test_production_refuses_missing_hosts_and_debug(tmp_path):
    key = {"SECRET_KEY": secrets.token_urlsafe(64)}
    assert "ALLOWED_HOSTS" in _manage("check", env={**PRODUCTION, **key, "ALLOWED_HOSTS": ""}, tmp_path=tmp_path).stderr
    assert "DEBUG" in _manage("check", env={**PRODUCTION, **key, "DEBUG": "true"}, tmp_path=tmp_path).stderr


def test_the_embedded_default_generates_one_random_key_per_checkout(tmp_path):
    show = ("shell", "-c", "from django.conf import settings; print(settings.SECRET_KEY)")

    first, second = (_manage(*show, env={}, tmp_path=tmp_path) for _ in range(2))

    assert first.returncode == 0, first.stderr
    key = first.stdout.strip().splitlines()[-1]
    assert key == second.stdout.strip().splitlines()[-1] == (tmp_path / "secret_key").read_text().strip()
    assert len(key) >= 80 and key not in deploy.REPOSITORY_KEYS
    assert stat.S_IMODE((tmp_path / "secret_key").stat().st_mode) == 0o600
    other = tmp_path / "other"
    other.mkdir()
    assert _manage(*show, env={}, tmp_path=other).stdout.strip().splitlines()[-1] != key  # another checkout, another key


def test_the_running_key_is_not_a_repository_key_and_the_key_file_is_ignored_by_git():
    assert settings.SECRET_KEY not in deploy.REPOSITORY_KEYS
    ignored = subprocess.run(["git", "check-ignore", ".secret_key"], cwd=ROOT, capture_output=True, text=True)
    assert ignored.returncode == 0


def test_security_settings_come_from_the_environment(tmp_path):
    show = ("shell", "-c", "from django.conf import settings as s; print(s.SECURE_HSTS_SECONDS, s.SECURE_SSL_REDIRECT, "
            "s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.ALLOWED_HOSTS, s.CSRF_TRUSTED_ORIGINS, s.API_DOCS_REQUIRE_LOGIN)")
    env = {**PRODUCTION, "SECRET_KEY": secrets.token_urlsafe(64), "SECURE_HSTS_SECONDS": "600",
           "SECURE_SSL_REDIRECT": "false", "ALLOWED_HOSTS": "a.example.com,b.example.com"}

    out = _manage(*show, env=env, tmp_path=tmp_path).stdout.strip().splitlines()[-1]

    assert out == ("600 False True True ['a.example.com', 'b.example.com'] ['https://ap.example.com'] True")


@pytest.mark.parametrize("url", ["/accounts/login/", "/api/docs/"])
def test_pages_carry_a_csp_that_allows_only_our_own_scripts(client, url):
    response = client.get(url)

    policy = response["Content-Security-Policy"]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";") if part.strip())
    assert directives["script-src"] == "'self'"
    assert directives["object-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in directives["script-src"] + directives["default-src"] and "eval" not in policy


def test_no_template_has_an_inline_script_or_style():
    for template in (ROOT / "templates").rglob("*.html"):
        text = template.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), template
        assert not re.search(r"<style\b|\sstyle=|\son[a-z]+=", text), template


@pytest.mark.django_db
def test_schema_and_swagger_can_be_restricted_to_signed_in_users(client, settings, requester):
    settings.API_DOCS_REQUIRE_LOGIN = True
    for url in ("/api/schema/", "/api/docs/", "/api/docs/?script"):
        response = client.get(url)
        assert response.status_code == 401, url
        assert url != "/api/schema/" or b"NOT_AUTHENTICATED" in response.content
    client.force_login(requester)
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/docs/").status_code == 200

    settings.API_DOCS_REQUIRE_LOGIN = False
    client.logout()
    assert client.get("/api/schema/").status_code == 200


@pytest.mark.parametrize("backend", ["django.core.mail.backends.console.EmailBackend",
                                     "django.core.mail.backends.filebased.EmailBackend"])
def test_production_refuses_an_email_backend_that_writes_reset_links_into_the_logs(tmp_path, backend):
    key = {"SECRET_KEY": secrets.token_urlsafe(64)}
    refused = _manage("check", env={**PRODUCTION, **key, "EMAIL_BACKEND": backend}, tmp_path=tmp_path)
    default = _manage("shell", "-c", "from django.conf import settings; print(settings.EMAIL_BACKEND)",
                      env={**PRODUCTION, **key}, tmp_path=tmp_path)

    assert refused.returncode != 0 and "EMAIL_BACKEND" in refused.stderr
    assert default.stdout.strip().splitlines()[-1] == "django.core.mail.backends.smtp.EmailBackend", default.stderr
