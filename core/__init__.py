"""The base layer: errors, clock, correlation, text, tokens, redaction and SQL helpers.

It imports only the standard library, Django and psycopg, and nothing of the apps above it
(the import-linter contract in setup.cfg enforces it)."""
