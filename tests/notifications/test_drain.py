"""A process that exits normally with notification jobs still queued (a web server's graceful
restart) runs them first, up to notifications.dispatch.DRAIN_SECONDS: a mass expiry's notices are
not dropped by a restart that comes right after it."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import os, sys, time
    import django
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentplatform.settings"
    django.setup()
    from django.conf import settings
    from notifications import dispatch

    class Slow:
        name = "slow"
        def apply(self, args, throw=False):
            time.sleep(0.2)
            with open(sys.argv[1], "a") as out:
                out.write(f"{args[0]}\\n")

    settings.CELERY_TASK_ALWAYS_EAGER = True
    settings.NOTIFY_THREADS = 1
    for n in range(5):
        dispatch.dispatch(Slow(), n)
    # the script ends here, with most of the five jobs still queued
""")


def test_a_process_that_exits_runs_its_queued_notifications_first(tmp_path):
    out = tmp_path / "ran.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env["LOG_LEVEL"] = "ERROR"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)

    assert done.returncode == 0, done.stderr[-2000:]
    assert out.read_text().split() == ["0", "1", "2", "3", "4"]


def test_a_full_queue_makes_the_caller_run_the_job(settings, monkeypatch):
    # given: one notification thread held busy, and room for 2 jobs queued or running
    import threading

    from notifications import dispatch

    monkeypatch.setattr(dispatch, "EAGER_IN_THREAD", True)  # the tests' default runs jobs inline
    settings.CELERY_TASK_ALWAYS_EAGER = True
    settings.NOTIFY_THREADS = 1
    settings.NOTIFY_QUEUE_MAX = 2
    release, ran, most = threading.Event(), [], []

    class Held:
        name = "held"

        def apply(self, args, throw=False):
            if args[0] == 0:
                release.wait(10)
            with dispatch._idle:
                most.append(dispatch._pending)
            ran.append((args[0], threading.current_thread().name))

    try:
        # when: five jobs are dispatched while the first one blocks its thread
        for n in range(5):
            dispatch.dispatch(Held(), n)
        # then: past the bound the caller ran them itself, at once
        caller = threading.current_thread().name
        assert sorted(n for n, who in ran if who == caller) == [2, 3, 4]
    finally:
        release.set()
        dispatch.join_notifications(10)
    assert sorted(n for n, _ in ran) == [0, 1, 2, 3, 4]  # none lost
    assert max(most) <= 2
