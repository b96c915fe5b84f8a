"""gunicorn settings for `make serve` and the container image.

gunicorn manages the processes, uvicorn's worker class serves the ASGI application
(agentplatform.asgi:application) in each of them: async Server-Sent Events hold no thread, the
sync views run in Django's thread pool. gunicorn rather than granian for its hooks: `child_exit`
marks a dead worker in prometheus-client's multiprocess directory, `on_starting` clears it, and
worker recycling (max_requests) and graceful timeouts are long proven. Everything below can be
overridden by the environment (WEB_BIND, WEB_CONCURRENCY, WEB_TIMEOUT, ...) or the command line.

Links in emails and webhook bodies start with PLATFORM_BASE_URL. When it is not set, `on_starting`
sets it from the first address the server binds (after the command line's --bind), before any
worker starts, so `make serve PORT=8765` sends links to port 8765, not 8000 (`base_url_for_bind`).

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


def base_url_for_bind(address: str, *, https: bool = False) -> str | None:
    """The base URL people reach a server bound to `address` at: "127.0.0.1:8765" ->
    "http://127.0.0.1:8765", "[::1]:9000" -> "http://[::1]:9000"; a wildcard host (0.0.0.0, ::)
    stands for this machine, reached here as 127.0.0.1 (set PLATFORM_BASE_URL to the public
    address); no port means gunicorn's 8000. None for a unix socket or a file descriptor."""
    address = str(address).strip()
    if not address or address.startswith(("unix:", "fd://")):
        return None
    if address.startswith("["):  # [v6]:port
        host, _, port = address[1:].partition("]")
        port = port.lstrip(":")
    elif address.count(":") > 1:  # a bare IPv6 address, no port
        host, port = address, ""
    else:
        host, _, port = address.partition(":")
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if https else 'http'}://{shown}:{port or '8000'}"


def _set_base_url(server) -> None:
    """Set PLATFORM_BASE_URL from the bound address unless the environment sets it (workers
    inherit the environment of the master, which runs this before forking them)."""
    if os.environ.get("PLATFORM_BASE_URL"):
        return
    addresses = list(server.cfg.bind or [])
    url = base_url_for_bind(addresses[0], https=bool(server.cfg.certfile)) if addresses else None
    if url:
        os.environ["PLATFORM_BASE_URL"] = url
        server.log.info("links in notifications start with %s (PLATFORM_BASE_URL)", url)


def on_starting(server):
    """A fresh metrics directory per server start (stale files would add old processes' counts),
    and the base URL of links derived from the bound address."""
    _set_base_url(server)
    path = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    if os.environ.get("PROMETHEUS_MULTIPROC_CLEAR", "1") != "0":  # 0: shared with Celery (compose.yaml)
        shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, exist_ok=True)


def child_exit(server, worker):
    """A worker that exited leaves the live gauges' sum (its counters stay counted)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def post_fork(server, worker):
    """OpenTelemetry tracing in each worker, configured after the fork (the SDK's exporter threads do
    not survive one), before the worker loads the app (whose `ready` then finds it done). Off, and
    nothing imported, unless OTEL_TRACES_EXPORTER names an exporter (agentplatform/ops/tracing.py)."""
    if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() in ("", "none"):
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
    from agentplatform.ops.tracing import configure_tracing

    configure_tracing()
