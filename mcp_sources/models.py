"""MCP servers as tool sources: the servers an operator registers and the tools
discovered on them. Each discovered tool is mirrored into a `tools.Tool` row (source
"mcp:<server>") so that it is governed exactly like a local tool; this app keeps what only a remote
tool has: the server's definition, its hash, and the hash an administrator reviewed."""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models

from mcp_sources.schema import definition_hash
from mcp_sources.vetting import definition_problems


class McpServer(models.Model):
    """One MCP server: where it is (streamable HTTP URL or stdio command), how to authenticate
    (static headers or OAuth client credentials), its limits, and what discovery learnt.

    `tenant` empty = platform-wide (offered to a tenant only through its whitelist, like a local
    tool); set = that tenant's own server, never offered to, searched by or called for another.
    Credentials (`headers`, `oauth_client_secret`) are readable only by platform operators
    (mcp_sources.admin) and never logged or audited.
    """

    class Transport(models.TextChoices):
        HTTP = "http", "Streamable HTTP"
        STDIO = "stdio", "stdio (a local command)"

    name = models.CharField(
        max_length=30, unique=True,
        validators=[RegexValidator(r"^[a-z][a-z0-9_]*$", "lower-case letters, digits and _ only")],
        help_text="Short name; its tools are called <name>__<tool> (what the model sees).")
    tenant = models.ForeignKey("tenancy.Tenant", null=True, blank=True, on_delete=models.CASCADE,
                               related_name="+", help_text="Empty = platform-wide.")
    transport = models.CharField(max_length=8, choices=Transport.choices, default=Transport.HTTP)
    url = models.URLField(blank=True, help_text="Streamable HTTP endpoint, e.g. https://mcp.example.com/mcp")
    command = models.CharField(max_length=500, blank=True, help_text="stdio: the executable to start.")
    args = models.JSONField(default=list, blank=True, help_text="stdio: its arguments (a JSON list of strings).")
    env = models.JSONField(default=dict, blank=True, help_text="stdio: extra environment variables (secret).")
    headers = models.JSONField(default=dict, blank=True, help_text="HTTP headers sent on every request (secret).")
    oauth_token_url = models.URLField(blank=True, help_text="OAuth client credentials: the token endpoint.")
    oauth_client_id = models.CharField(max_length=200, blank=True)
    oauth_client_secret = models.CharField(max_length=500, blank=True, help_text="Secret.")
    oauth_scopes = models.CharField(max_length=500, blank=True, help_text="Space-separated scopes.")
    timeout_seconds = models.FloatField(default=30.0, help_text="Whole-call limit: connect, list, call.")
    tool_list_ttl_seconds = models.PositiveIntegerField(default=300, help_text="Re-discover after this long.")
    breaker_failures = models.PositiveSmallIntegerField(default=3, help_text="Open the breaker after N failures.")
    breaker_reset_seconds = models.PositiveIntegerField(default=60, help_text="Try again after this long.")
    owner = models.CharField(max_length=200, help_text="Team or person answering for this server's tools.")
    enabled = models.BooleanField(default=True)
    # What discovery learnt (shown in the admin).
    protocol_version = models.CharField(max_length=32, blank=True, editable=False)
    server_name = models.CharField(max_length=200, blank=True, editable=False)
    server_version = models.CharField(max_length=64, blank=True, editable=False)
    discovered_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.CharField(max_length=500, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    SECRET_FIELDS = ("headers", "env", "oauth_client_secret")

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name

    @property
    def source(self) -> str:
        """The `Tool.source` of this server's tools."""
        return f"mcp:{self.name}"

    def clean(self) -> None:
        """An HTTP server needs a URL, a stdio server a command; OAuth needs its three fields."""
        if self.transport == self.Transport.HTTP and not self.url:
            raise ValidationError({"url": "a streamable HTTP server needs its URL"})
        if self.transport == self.Transport.STDIO and not self.command:
            raise ValidationError({"command": "a stdio server needs the command that starts it"})
        if not isinstance(self.args, list) or not all(isinstance(a, str) for a in self.args):
            raise ValidationError({"args": "a JSON list of strings"})
        for name in ("headers", "env"):
            value = getattr(self, name)
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise ValidationError({name: "a JSON object of strings"})
        oauth = [self.oauth_token_url, self.oauth_client_id, self.oauth_client_secret]
        if any(oauth) and not all(oauth):
            raise ValidationError({"oauth_token_url": "OAuth needs the token URL, client id and client secret"})
        if self.timeout_seconds <= 0:
            raise ValidationError({"timeout_seconds": "must be positive"})


class McpTool(models.Model):
    """One tool as the server last described it, and the definition an administrator reviewed.

    `definition_hash` = SHA-256 of the canonical JSON of {name, description, inputSchema} as last
    listed; `reviewed_hash` = the one an administrator approved and `reviewed_definition` that
    definition itself ({"name", "description", "inputSchema"}), from which the model's definition is
    built. `refusal` = why discovery refused the current definition (mcp_sources.vetting), "" when
    it passed. The Tool row may be enabled, and is offered, only while `review_problem()` is "":
    a server that changes a reviewed tool behind its name gets it disabled again.
    """

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    tool = models.OneToOneField("tools.Tool", on_delete=models.CASCADE, related_name="mcp")
    remote_name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict)
    annotations = models.JSONField(null=True, blank=True,
                                   help_text="The server's own hints, shown for review only: never used for risk.")
    definition_hash = models.CharField(max_length=64)
    refusal = models.TextField(blank=True, help_text="Why discovery refused this definition (hidden characters, "
                                                     "length, names); it cannot be reviewed until the server fixes it.")
    reviewed_hash = models.CharField(max_length=64, blank=True)
    reviewed_definition = models.JSONField(null=True, blank=True, help_text="The definition as reviewed: what the "
                                                                            "model is sent, nothing else.")
    reviewed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    reviewed_at = models.DateTimeField(null=True, blank=True)
    listed = models.BooleanField(default=True, help_text="False when the server no longer lists it.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["server", "remote_name"]
        verbose_name = "MCP tool"
        constraints = [models.UniqueConstraint(fields=["server", "remote_name"], name="mcp_tool_unique_per_server")]

    def __str__(self) -> str:
        return f"{self.server.name}:{self.remote_name}"

    @property
    def reviewed(self) -> bool:
        return bool(self.reviewed_hash) and self.reviewed_hash == self.definition_hash

    def current_definition(self) -> dict:
        """The definition as the server last listed it: {"name", "description", "inputSchema"}."""
        return {"name": self.remote_name, "description": self.description or "", "inputSchema": self.input_schema or {}}

    def review_problem(self) -> str:
        """Why this tool may not be enabled or offered now, "" when it may: its current definition
        is the reviewed one, the stored reviewed definition still hashes to the reviewed hash (a
        row edited behind the review fails here), it passes the checks of mcp_sources.vetting, and
        the server still lists it."""
        if self.refusal:
            return f"its definition was refused at discovery: {self.refusal}"
        if not self.listed:
            return "the server no longer lists it"
        if not self.reviewed_hash:
            return "its definition has not been reviewed (MCP tools: review it first)"
        if self.reviewed_hash != self.definition_hash:
            return "the server changed its definition since it was reviewed; review it again"
        reviewed = self.reviewed_definition
        if not isinstance(reviewed, dict) or definition_hash(
                name=reviewed.get("name"), description=reviewed.get("description"),
                input_schema=reviewed.get("inputSchema")) != self.reviewed_hash:
            return "the stored reviewed definition does not match the reviewed hash; review it again"
        problems = definition_problems(name=reviewed.get("name"), description=reviewed.get("description"),
                                       input_schema=reviewed.get("inputSchema"))
        if problems:
            return "the reviewed definition fails the checks: " + "; ".join(problems)
        return ""


def tool_enable_refusal(tool) -> str:
    """The enable guard of remote tools (tools.models.ENABLE_GUARDS, registered in
    mcp_sources.apps): why the Tool row `tool` may not be enabled, "" when it may. A row with an
    McpTool may be enabled only while `McpTool.review_problem()` is ""; a row whose source says it
    is remote but has no McpTool never."""
    row = McpTool.objects.filter(tool_id=tool.pk).first() if tool.pk is not None else None
    if row is None:
        return "a remote tool has no discovered definition" if (tool.source or "").startswith("mcp:") else ""
    return row.review_problem()
