"""Shared set-up of the benchmark scripts: Django on PostgreSQL, the header every script prints
(command, machine, versions), and the statistics.

The benchmarks measure PostgreSQL only; SQLite figures would describe nothing we ship. Every
script calls `setup()` first, which exits with status 2 and a clear message when DATABASE_URL is
not a PostgreSQL URL.
"""
from __future__ import annotations

import datetime
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable

ROOT = Path(__file__).resolve().parent.parent
BENCH_DATABASE_HINT = (
    "createdb -h 127.0.0.1 -U postgres ap_bench\n"
    "  DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench make bench"
)


def require_postgres() -> str:
    """Return DATABASE_URL, or exit 2 with a message when it is not a PostgreSQL URL."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://", "pgsql://")):
        print("bench: DATABASE_URL must point at PostgreSQL; the benchmarks are PostgreSQL figures.\n"
              f"  got: {masked_url(url) or '(unset)'}\n  use a database of its own, e.g.\n  {BENCH_DATABASE_HINT}",
              file=sys.stderr)
        sys.exit(2)
    return url


def masked_url(url: str) -> str:
    """DATABASE_URL with any password replaced by ***, fit to print."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    if ":" in credentials:
        credentials = credentials.split(":", 1)[0] + ":***"
    return f"{scheme}://{credentials}@{host}"


def setup(*, broker_url: str | None = None) -> None:
    """Configure the environment, start Django and migrate the bench database.

    broker_url: a Redis URL makes this process publish tasks to it (CELERY_TASK_ALWAYS_EAGER=false);
    None runs tasks eagerly in-process. The model is always the offline planner (deterministic, no
    network), whatever LLM_API_KEY says. Exits 2 when DATABASE_URL is not PostgreSQL or unreachable.
    """
    require_postgres()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
    os.environ["LLM_API_KEY"] = ""
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    # Benchmarks make thousands of model calls a day; the tenants' daily budget of model calls
    # would refuse them part-way. 0 = no limit (set it to measure the quota's own cost).
    os.environ.setdefault("TENANT_MODEL_CALLS_PER_DAY", "0")
    if broker_url:
        os.environ["CELERY_BROKER_URL"] = broker_url
        os.environ["CELERY_TASK_ALWAYS_EAGER"] = "false"
    else:
        os.environ.pop("CELERY_BROKER_URL", None)
        os.environ["CELERY_TASK_ALWAYS_EAGER"] = "true"
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import OperationalError

    try:
        call_command("migrate", verbosity=0)
    except OperationalError as error:
        print(f"bench: cannot use the database ({str(error).strip().splitlines()[0]}); create it first:\n"
              f"  {BENCH_DATABASE_HINT}", file=sys.stderr)
        sys.exit(2)


def command_line() -> str:
    """The command that produced this output, with DATABASE_URL (password masked) in front."""
    script = os.path.relpath(sys.argv[0], ROOT) if os.path.isabs(sys.argv[0]) else sys.argv[0]
    args = " ".join(shlex.quote(a) for a in sys.argv[1:])
    return f"DATABASE_URL={masked_url(os.environ['DATABASE_URL'])} python {script} {args}".rstrip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _git_revision() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{' + uncommitted changes' if dirty else ''}" if head else "unknown"


def header(title: str, notes: Iterable[str] = ()) -> None:
    """Print what is measured, the command, the machine and the versions."""
    import django
    import psycopg
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        pg_version = cursor.fetchone()[0]
    cores = os.cpu_count() or 0
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    print(f"== {title}")
    print(f"command : {command_line()}")
    print(f"machine : {_cpu_model()}, {cores} cores ({usable} usable), {platform.system()} {platform.release()}")
    print(f"software: Python {platform.python_version()}, Django {django.get_version()}, psycopg {psycopg.__version__}, "
          f"PostgreSQL {pg_version} (local, same machine)")
    print(f"code    : {_git_revision()}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")
    print(f"load    : {load_average()} (other processes share these cores; compare figures at a low load)")
    for note in notes:
        print(f"note    : {note}")
    print()


def load_average() -> str:
    """The 1/5/15-minute load averages, as printed in the header and at the end of a run."""
    try:
        return "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "load average unknown"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0-100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values: list[float]) -> dict[str, float]:
    """{"n", "median", "p99", "min", "max", "mean"} of a non-empty list (same unit as the input)."""
    return {"n": len(values), "median": statistics.median(values), "p99": percentile(values, 99),
            "min": min(values), "max": max(values), "mean": statistics.fmean(values)}


def row(label: str, values_ms: list[float]) -> str:
    """One printed line: label, n, median, p99, min, max (milliseconds, 3 decimals)."""
    s = summary(values_ms)
    return (f"  {label:<40} n={s['n']:<5} median {s['median']:8.3f} ms   p99 {s['p99']:8.3f} ms   "
            f"min {s['min']:7.3f}   max {s['max']:8.3f}")


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def elapsed_ms(started: float) -> float:
    """Milliseconds since `started` (a time.perf_counter() value)."""
    return (time.perf_counter() - started) * 1000


def median_p95(times: list[float]) -> dict[str, float]:
    """{"median", "p95"} of `times` (milliseconds in, milliseconds out)."""
    return {"median": summary(times)["median"], "p95": percentile(times, 95)}


def explain_analyze(sql: str, *, lines: int = 25) -> str:
    """`EXPLAIN (ANALYZE, BUFFERS)` of `sql` on the default connection, as indented text (the first
    `lines` lines). `sql` is a captured statement with its values inlined (CaptureQueriesContext),
    sent as is through psycopg's client-side binding cursor; a statement PostgreSQL refuses gives
    "(not explained: <error>)" and its transaction is rolled back. PostgreSQL only."""
    from django.db import connection

    import psycopg

    connection.ensure_connection()
    try:
        with psycopg.ClientCursor(connection.connection) as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
            return "\n".join(f"      {line[0]}" for line in cursor.fetchall()[:lines])
    except psycopg.Error as error:
        connection.connection.rollback()
        return f"      (not explained: {str(error).strip().splitlines()[0]})"
