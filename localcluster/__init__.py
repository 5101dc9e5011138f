"""A local multi-node topology for development and tests: production units behind HAProxy and a front, with Redis and PostgreSQL."""
