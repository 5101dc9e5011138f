"""The DRF peer's settings: the shared startproject settings, DRF, JSON only, bearer tokens; with
PEER_EQUAL_WORK=1, a throttle class counting each request per token (bench/peers/rate_limit.py)."""

from bench.peers.settings import *  # noqa: F403
from bench.peers.settings import INSTALLED_APPS, PEER_EQUAL_WORK

INSTALLED_APPS = [*INSTALLED_APPS, "rest_framework"]
ROOT_URLCONF = "bench.peers.drf_peer.urls"
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["bench.peers.drf_peer.authentication.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
}
if PEER_EQUAL_WORK:
    REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"] = ["bench.peers.drf_peer.throttling.TokenRateThrottle"]
