"""gunicorn settings for `make serve` and the container image.

gunicorn manages the processes, uvicorn's worker class serves the ASGI application
(agentplatform.asgi:application) in each of them: async Server-Sent Events hold no thread, the
sync views run in Django's thread pool. gunicorn rather than granian for its hooks: `child_exit`
marks a dead worker in prometheus-client's multiprocess directory, `on_starting` clears it, and
worker recycling (max_requests) and graceful timeouts are long proven. Everything below can be
overridden by the environment (WEB_BIND, WEB_CONCURRENCY, WEB_TIMEOUT, ...) or the command line.

The app is not preloaded: each worker imports agentplatform.asgi itself, so each worker runs
its own web sweeper thread (agentplatform/runtime/settle.py) and its own event listener.
"""
import os
import shutil
import tempfile

bind = os.environ.get("WEB_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "uvicorn_worker.UvicornWorker"
# A worker silent this long (blocked event loop) is restarted; streams do not count as silence.
timeout = int(os.environ.get("WEB_TIMEOUT", "60"))
graceful_timeout = int(os.environ.get("WEB_GRACEFUL_TIMEOUT", "30"))
keepalive = int(os.environ.get("WEB_KEEPALIVE", "5"))
max_requests = int(os.environ.get("WEB_MAX_REQUESTS", "0"))  # 0: never recycle
max_requests_jitter = int(os.environ.get("WEB_MAX_REQUESTS_JITTER", "0"))
preload_app = False
accesslog = None  # the app writes its own JSON access line, with the request id
errorlog = "-"
loglevel = os.environ.get("WEB_LOG_LEVEL", "info")
proc_name = "agentplatform-web"

# PostgreSQL: a connection pool of at most this many connections per worker (settings.py), plus
# one LISTEN connection per worker for the event streams: 2 workers hold at most 10 in all.
os.environ.setdefault("DB_POOL_MAX_SIZE", "4")

# prometheus-client multiprocess mode: every worker writes its samples here; /metrics merges them.
# Must be in the environment before any worker imports prometheus_client.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR",
                      os.path.join(tempfile.gettempdir(), f"agentplatform-prometheus-{os.getuid()}"))


def on_starting(server):
    """A fresh metrics directory per server start (stale files would add old processes' counts)."""
    path = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    if os.environ.get("PROMETHEUS_MULTIPROC_CLEAR", "1") != "0":  # 0: shared with Celery (compose.yaml)
        shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, exist_ok=True)


def child_exit(server, worker):
    """A worker that exited leaves the live gauges' sum (its counters stay counted)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
