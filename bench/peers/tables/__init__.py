"""The service's two tables as the Django peers of `make bench` see them (unmanaged: the service migrates them)."""
