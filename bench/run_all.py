"""Run the benchmarks (the four numbered ones, the audit chain, the SSE fan-out, MCP) one after the other (`make bench`), each in its own process.

Needs DATABASE_URL=postgres://... (a database of its own: the scripts reset their bench data in it)
and, for the worker benchmark, Redis at 127.0.0.1:6379 (database 14). Exits 2 when DATABASE_URL is
not PostgreSQL, otherwise with the first non-zero status of a benchmark (exactly_once exits 1 when
a side effect ran other than once).

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/run_all.py [--quick]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

# script -> its arguments with --quick (without: each script's defaults, the figures in README.md)
BENCHMARKS = {
    "governance_overhead.py": ["--iterations", "300", "--warmup", "30"],
    "confirm_latency.py": ["--runs", "20", "--approvals", "10", "--warmup", "2"],
    "throughput.py": ["--seconds", "3", "--tokens", "80", "--runs", "40"],
    "exactly_once.py": ["--tokens", "50"],
    "audit_chain.py": ["--iterations", "300", "--warmup", "30", "--seconds", "2"],
    "sse_fanout.py": ["--clients", "50", "--events", "20"],
    "memory_growth.py": ["--cycles", "300", "--warmup", "30", "--every", "100"],
    "mcp_call.py": ["--iterations", "100", "--warmup", "10"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller samples (a smoke run, not figures to quote)")
    args = parser.parse_args()
    _common.require_postgres()
    here = Path(__file__).resolve().parent
    statuses = {}
    for script, quick in BENCHMARKS.items():
        command = [sys.executable, str(here / script), *(quick if args.quick else [])]
        started = time.monotonic()
        statuses[script] = subprocess.run(command, cwd=_common.ROOT).returncode
        print(f"-- {script}: exit {statuses[script]} after {time.monotonic() - started:.0f} s\n", flush=True)
    failed = {k: v for k, v in statuses.items() if v != 0}
    print("all benchmarks finished" if not failed else f"failed: {failed}")
    return next(iter(failed.values()), 0)


if __name__ == "__main__":
    sys.exit(main())
