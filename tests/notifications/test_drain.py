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
