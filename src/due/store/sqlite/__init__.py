"""SQLite backend (the embedded default)."""
