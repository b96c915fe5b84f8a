"""Django's PostgreSQL backend with one change (see base.py)."""
