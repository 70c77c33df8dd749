"""The run store (SQLite)."""
