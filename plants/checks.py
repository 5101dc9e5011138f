"""System checks: the admin's middleware, which AdminMiddleware runs, is all there."""

from django.conf import settings
from django.core.checks import Error, register

# What the silenced checks admin.E408–E410 and axes.W002 look for, in this order.
REQUIRED_ADMIN_MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "axes.middleware.AxesMiddleware",
]


@register()
def admin_middleware_check(app_configs, **kwargs) -> list[Error]:
    admin_middleware = getattr(settings, "ADMIN_MIDDLEWARE", [])
    errors = []
    if "plants.middleware.AdminMiddleware" not in settings.MIDDLEWARE:
        errors.append(Error("MIDDLEWARE must hold plants.middleware.AdminMiddleware.", id="plants.E001"))
    missing = [name for name in REQUIRED_ADMIN_MIDDLEWARE if name not in admin_middleware]
    if missing:
        errors.append(Error(f"ADMIN_MIDDLEWARE must hold {', '.join(missing)}.", id="plants.E002"))
    elif [name for name in admin_middleware if name in REQUIRED_ADMIN_MIDDLEWARE] != REQUIRED_ADMIN_MIDDLEWARE:
        errors.append(
            Error(f"ADMIN_MIDDLEWARE must hold them in this order: {REQUIRED_ADMIN_MIDDLEWARE}.", id="plants.E003")
        )
    elif admin_middleware[-1] != REQUIRED_ADMIN_MIDDLEWARE[-1]:
        errors.append(Error("ADMIN_MIDDLEWARE must end with axes.middleware.AxesMiddleware.", id="plants.E004"))
    return errors
