"""Admin login lockout: one limit per (user name, client) and one per client, on django-axes' documented settings."""

from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.signals import user_logged_in
from django.db.models import Sum
from django.dispatch import receiver
from django.utils import timezone

from plants.clients import client_ip


def pair_failures(username: str | None, address: str | None) -> int:
    """Failed logins for `username` from `address` within the cool-off time, as axes records them."""
    attempts = AccessAttempt.objects.filter(
        username=username, ip_address=address, attempt_time__gte=timezone.now() - settings.AXES_COOLOFF_TIME
    )
    return attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0


def failure_limit(request, credentials) -> int:
    """AXES_FAILURE_LIMIT, as a callable: the limit axes compares a login's failures with.

    With AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"], axes counts the larger of
    the pair's failures and the client's, and the client's are never fewer. So: the pair's limit
    (PLANTS_ADMIN_LOGIN_FAILURES) once the pair has reached it, else the client's
    (PLANTS_ADMIN_CLIENT_LOGIN_FAILURES): a pair is locked at 5, a client at 20 whatever the names.
    """
    username = (credentials or request.POST).get("username")
    pair_limit = settings.PLANTS_ADMIN_LOGIN_FAILURES
    if pair_failures(username, client_ip(request)) >= pair_limit:
        return pair_limit
    return settings.PLANTS_ADMIN_CLIENT_LOGIN_FAILURES


@receiver(user_logged_in)
def forget_the_pair_s_failures(sender, request, user, **kwargs) -> None:
    """A login clears that user's failures from that client, and no others (AXES_RESET_ON_SUCCESS off).

    axes' own reset would clear the client's too: whoever owns one account could then guess another's
    password without end, a few guesses between each of its own logins.
    """
    if request is not None:
        AccessAttempt.objects.filter(username=user.get_username(), ip_address=client_ip(request)).delete()
