"""The benchmark: the service's POST /plants against a bare Django view, in one server."""
