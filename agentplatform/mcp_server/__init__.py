"""The MCP server: the governed tools of a tenant served over MCP (streamable HTTP at /mcp/) to
agents of any framework (docs/mcp.md). Every call goes through the same pipeline as a call of the
platform's own agent loop (tools.governed_call)."""
