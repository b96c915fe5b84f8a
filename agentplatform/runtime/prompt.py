"""The system prompt the agent loop sends, and its version (the metrics' `prompt_version` label)."""
from __future__ import annotations

import hashlib
from typing import Any

from agentplatform.llm import pending as llm_pending

# Rule 6 keeps a refusal by a person, a deadline that passed and a replaced request distinct: the
# model must tell the user which of them happened, never blur them into "it failed".
SYSTEM_PROMPT = (
    "You are an enterprise business agent. Rules: 1. Inventory, orders and live status must come from tools, "
    "never guessed. 2. When a tool returns CONFIRMATION_REQUIRED, show the user what must be confirmed. "
    "3. Do not retry a high-risk tool before it is confirmed. 4. When a tool fails, state the error exactly; "
    "never pretend it succeeded. 5. Never ask the user for a tenant id, permissions or system tokens. "
    "6. REJECTED means a human refused the action (the result says who and why); CONFIRMATION_EXPIRED means "
    "nobody decided in time; SUPERSEDED means a newer request replaced it; none of them ran. "
    "7. APPROVER_GUIDANCE means an approver answered with guidance instead of deciding: nothing ran, it is not "
    "a rejection; follow the guidance. WITHDRAWN means the user withdrew the request: nothing ran."
)

# Which system prompt a run was driven by: the first 8 hex digits of its SHA-256.
PROMPT_VERSION = hashlib.sha256(SYSTEM_PROMPT.encode()).hexdigest()[:8]


def system_messages(waiting: list) -> list[dict[str, Any]]:
    """The system message of a model call: the prompt, plus the note on the conversation's calls
    still `waiting` for a decision (agentplatform.llm.pending.system_note)."""
    return [{"role": "system", "content": SYSTEM_PROMPT + llm_pending.system_note(waiting)}]
