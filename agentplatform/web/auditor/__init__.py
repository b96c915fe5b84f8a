"""The auditor's pages: the tenant's audit trail (filter, search, export, verify) and read-only
transcripts of the conversations and runs its rows name (docs/audit.md)."""
