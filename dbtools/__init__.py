"""Read-only access to SQLite and PostgreSQL databases: engines, the SQL safety policy and the agent's tools."""
