"""Browser tests: Playwright's sync API driving Debian's Chromium against pytest-django's
live_server (a real threaded HTTP server on the test database).

Playwright's sync API runs an asyncio loop in this thread, so Django's "async unsafe" guard must
be told that the ORM calls the tests make here are fine.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connections
from django.db.backends.signals import connection_created

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"


def _read_uncommitted(sender=None, connection=None, **kwargs) -> None:
    if connection.vendor == "sqlite" and connection.is_in_memory_db():
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA read_uncommitted = 1")


@pytest.fixture(autouse=True)
def _sqlite_memory_readers_do_not_lock(transactional_db) -> Iterator[None]:
    """On SQLite the test database is one shared-cache memory database, where a reader meets a
    table another thread is writing with an immediate SQLITE_LOCKED ("database table is locked";
    no busy timeout applies). The live server reads (event stream, page polls) while requests
    write, so during browser tests readers may read uncommitted rows there. A file database and
    PostgreSQL are untouched."""
    _read_uncommitted(connection=connections["default"])
    connection_created.connect(_read_uncommitted, dispatch_uid="browser-read-uncommitted")
    yield
    connection_created.disconnect(dispatch_uid="browser-read-uncommitted")


CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"


def playwright_expect():
    """Playwright's `expect`, imported when a browser test runs (Playwright is a development
    dependency; collecting the tests must not need it)."""
    from playwright.sync_api import expect

    return expect


def named_shot(person, name: str) -> None:
    """Save a full-page screenshot of `person`'s page as test-artifacts/browser/<name>."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    person.page.screenshot(path=str(ARTIFACTS / name), full_page=True)
TIMEOUT_MS = 20_000
# A phone: 390 x 844 CSS pixels, touch, mobile viewport meta honoured.
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True, "has_touch": True}


@pytest.fixture(scope="module")
def browser() -> Iterator:
    """One headless Chromium per test module (the Playwright loop lives only that long)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(autouse=True)
def _short_streams(settings) -> None:
    """Bound each SSE response so no server thread outlives a test by much (the page's
    EventSource reconnects with Last-Event-ID, as it would behind a proxy)."""
    settings.API_SSE_MAX_SECONDS = 8.0
    settings.API_SSE_POLL_SECONDS = 0.2


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings) -> None:
    """Seeding hashes ten demo passwords per test; a fast hasher keeps these tests quick (the
    hasher is not what they test)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


class Person:
    """One signed-in person: their own browser context (cookies), a page, and screenshots."""

    def __init__(self, browser, base_url: str, name: str, test_name: str, **context_options) -> None:
        self.base_url = base_url
        self.name = name
        self.test_name = test_name
        options = {"viewport": {"width": 1360, "height": 900}, "locale": "en-US", **context_options}
        self.context = browser.new_context(**options)
        self.context.set_default_timeout(TIMEOUT_MS)
        self.page = self.context.new_page()
        self.console_errors: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.console_errors.append(m.text))
        self.page.on("pageerror", lambda e: self.console_errors.append(str(e)))

    def sign_in(self, username: str, password: str, next_path: str = "") -> None:
        from playwright.sync_api import expect

        self.page.goto(f"{self.base_url}/accounts/login/" + (f"?next={next_path}" if next_path else ""))
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", password)
        self.page.click("button[type=submit]")
        expect(self.page.locator("[data-testid=username]").or_(self.page.locator("#user-tools"))).to_be_visible()

    def goto(self, path: str) -> None:
        self.page.goto(self.base_url + path)

    def shot(self, step: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.test_name}--{self.name}--{step}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def open_person(browser, live_server, request) -> Iterator:
    """`open_person(name, **context_options)` -> a Person with a fresh browser context (Playwright's
    `new_context` options, e.g. PHONE below); all closed after the test."""
    people: list[Person] = []
    test_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)

    def _open(name: str, **context_options) -> Person:
        person = Person(browser, live_server.url, name, test_name, **context_options)
        people.append(person)
        return person

    yield _open
    for person in people:
        person.close()
