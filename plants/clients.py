"""The client's address: the one place that names the client, for the limits kept per address."""


def client_ip(request) -> str | None:
    """The client's address, for the admin's login lockout and the limit on failed authentication.

    Over TCP, the peer's address (REMOTE_ADDR). Behind make serve's nginx the app server listens
    on a unix socket (no REMOTE_ADDR) and nginx sets X-Real-IP to its $remote_addr, replacing any
    the client sent; nginx takes that address from X-Forwarded-For only on connections from
    PLANTS_TRUSTED_PROXIES (deploy/), so no client can name itself.
    """
    return request.META.get("REMOTE_ADDR") or request.META.get("HTTP_X_REAL_IP") or None
