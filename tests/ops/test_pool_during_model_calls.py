"""Slow model calls do not hold pooled database connections: with DB_POOL_MAX_SIZE=1 and a model
that takes 2 s, two chats at once both answer, where the second used to wait for the only connection until DB_POOL_TIMEOUT and fail (in a web
process, approval pages answered 500 the same way). Real processes, a real pool, PostgreSQL."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.llm.fake_openai_server import FakeOpenAIServer, slow_answer

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SCRIPT = r"""
import json, os, sys, threading
sys.path.insert(0, os.getcwd())
import django
django.setup()
from agentplatform.runtime import services
from agentplatform.tenancy.models import User

results = {}
def chat(i):
    user = User.objects.get(username="acme-requester")
    try:
        results[i] = services.chat_send(user=user, message=f"hello {i}").run.status
    except Exception as error:  # reported
        results[i] = f"{type(error).__name__}: {str(error)[:120]}"
    finally:
        from django.db import connection
        connection.close()

threads = [threading.Thread(target=chat, args=(i,)) for i in range(2)]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps(results))
"""


def test_two_chats_share_one_pooled_connection_while_their_model_calls_wait(people):
    settings_dict = connection.settings_dict
    url = f"postgres://{settings_dict['USER'] or 'postgres'}@{settings_dict['HOST'] or '127.0.0.1'}:" \
          f"{settings_dict['PORT'] or 5432}/{settings_dict['NAME']}"
    with FakeOpenAIServer() as server:
        server.enqueue(slow_answer(content="Hello.", delay_seconds=2), slow_answer(content="Hello.", delay_seconds=2))
        env = {**os.environ, "DATABASE_URL": url, "DB_POOL_MAX_SIZE": "1", "DB_POOL_TIMEOUT": "1",
               "LLM_API_KEY": "sk-test-pool", "LLM_BASE_URL": server.url, "LLM_MODEL": "gpt-4o-mini",
               "LLM_STREAM": "false", "LLM_MAX_RETRIES": "0", "TENANT_MODEL_CALLS_PER_DAY": "0",
               "DJANGO_SETTINGS_MODULE": "agentplatform.settings", "LOG_LEVEL": "ERROR"}
        env.pop("CELERY_BROKER_URL", None)
        done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)

    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results == {"0": "COMPLETED", "1": "COMPLETED"}, results
