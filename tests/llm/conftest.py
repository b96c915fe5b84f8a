"""Fixtures for the model-access tests: a scripted OpenAI-protocol server and an SDK client for it."""
from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from agentplatform.llm.factory import reset_client
from tests.llm.fake_openai_server import FakeOpenAIServer

TEST_API_KEY = "sk-test-4f1c9a1b2c3d4e5f"


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """A started FakeOpenAIServer; enqueue responses, then read `.requests`."""
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def openai_client(fake_openai: FakeOpenAIServer) -> Iterator[openai.OpenAI]:
    """The real SDK pointed at the fake server, with 2 bounded retries and a short timeout."""
    client = openai.OpenAI(base_url=fake_openai.url, api_key=TEST_API_KEY, max_retries=2, timeout=10)
    yield client
    client.close()


@pytest.fixture
def offline_settings(settings):
    """Settings that select the embedded offline planner; the cached client is rebuilt around the test."""
    settings.LLM_API_KEY = ""
    settings.LLM_MODEL = "offline-planner"
    reset_client()
    yield settings
    reset_client()
