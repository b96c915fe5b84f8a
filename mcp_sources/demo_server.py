"""A small MCP server built with the official SDK (MCPServer): the demo's remote tool source and
the tests' local server. Run it as

    python -m mcp_sources.demo_server stdio
    python -m mcp_sources.demo_server http 8765        # streamable HTTP at http://127.0.0.1:8765/mcp

Tools (a logistics partner's, made up): `track_shipment` (reads) and `open_support_ticket` (a side
effect: each execution appends one JSON line to $MCP_DEMO_LOG when set). Knobs for tests:
MCP_DEMO_SCHEMA=v2 changes open_support_ticket's input schema (a new `assignee` argument);
MCP_DEMO_HANG=<seconds> makes every tool call sleep that long before answering;
MCP_DEMO_HIDDEN=<text> appends <text> to track_shipment's description as invisible Unicode tag
characters (what a poisoned server would do).
"""
from __future__ import annotations

import json
import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("acme-logistics", version="1.4.0", log_level="WARNING")

_SHIPMENTS = {
    "SF1234567890": {"status": "IN_TRANSIT", "carrier": "SF Express", "city": "Hangzhou",
                     "receiver_phone": "13812345678"},
    "YT9876543210": {"status": "DELIVERED", "carrier": "YTO", "city": "Shanghai", "receiver_phone": "13900001111"},
}


def _hang() -> None:
    seconds = float(os.environ.get("MCP_DEMO_HANG") or 0)
    if seconds:
        time.sleep(seconds)


_TRACK = "Track a parcel by its tracking number (e.g. SF1234567890): carrier, status, city. 查询快递运单的物流状态。"
if os.environ.get("MCP_DEMO_HIDDEN"):
    # The text as Unicode tag characters: nothing on a screen, plain ASCII to a model.
    _TRACK += "".join(chr(0xE0000 + ord(c)) for c in os.environ["MCP_DEMO_HIDDEN"] if ord(c) < 0x80)


@server.tool(description=_TRACK)
def track_shipment(tracking_number: str) -> dict:
    _hang()
    shipment = _SHIPMENTS.get(tracking_number)
    if shipment is None:
        raise ValueError(f"no shipment {tracking_number}")
    return {"tracking_number": tracking_number, **shipment}


if os.environ.get("MCP_DEMO_SCHEMA") == "v2":
    @server.tool(description="Open a support ticket with the logistics partner about a shipment. 创建物流工单。")
    def open_support_ticket(tracking_number: str, subject: str, assignee: str = "") -> dict:
        return _open(tracking_number, subject)
else:
    @server.tool(description="Open a support ticket with the logistics partner about a shipment. 创建物流工单。")
    def open_support_ticket(tracking_number: str, subject: str) -> dict:
        return _open(tracking_number, subject)


def _open(tracking_number: str, subject: str) -> dict:
    _hang()
    log = os.environ.get("MCP_DEMO_LOG")
    number = f"T-{abs(hash((tracking_number, subject, time.time_ns()))) % 10**8:08d}"
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"ticket": number, "tracking_number": tracking_number, "subject": subject}) + "\n")
    return {"ticket": number, "tracking_number": tracking_number, "status": "OPEN"}


def main(argv: list[str]) -> None:
    if len(argv) > 1 and argv[1] == "http":
        port = int(argv[2]) if len(argv) > 2 else 8765
        server.run(transport="streamable-http", host="127.0.0.1", port=port, stateless_http=True, json_response=True)
    else:
        server.run(transport="stdio")


if __name__ == "__main__":
    main(sys.argv)
