"""Django's PostgreSQL backend, with a connection health check that costs no query."""
