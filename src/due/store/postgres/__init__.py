"""PostgreSQL backend."""
