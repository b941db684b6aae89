"""Read-only access to SQLite, PostgreSQL, MySQL/MariaDB and DuckDB databases: engines, the SQL safety policy
and the agent's tools."""
