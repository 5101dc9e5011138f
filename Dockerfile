# The production unit in an OCI image: nginx in front of Granian, run by deploy/serve.py as `make
# serve` runs it (the systemd install runs the same config and command as units of its own), as an
# unprivileged user. Podman and Docker both find this file.
# How to build and run it: docs/deploying.md#with-containers. What it holds: the venv and the app
# (.dockerignore leaves out the rest of the checkout), no compilers, no pip cache, no secret.
ARG BASE=docker.io/library/debian:bookworm-slim

FROM ${BASE} AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.txt /opt/plantstore/requirements.txt
# The venv without pip (nothing installs at run time) and without translations' sources (Django
# reads only their compiled .mo files). A network that inspects TLS needs its CA bundle: given as
# the build secret `ca-bundle`, it is mounted for this step alone and never stored in a layer.
RUN --mount=type=secret,id=ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && python3 -m venv /opt/plantstore/venv \
    && /opt/plantstore/venv/bin/pip install --no-cache-dir --disable-pip-version-check \
        -r /opt/plantstore/requirements.txt \
    && /opt/plantstore/venv/bin/pip uninstall --quiet --yes pip setuptools \
    && find /opt/plantstore/venv -name '*.po' -delete
COPY . /opt/plantstore/app
# Static files collected at build time; the key and the database URL only let the settings load for it.
RUN cd /opt/plantstore/app \
    && DJANGO_SECRET_KEY=collectstatic-only-this-key-signs-nothing-0123456789 DATABASE_URL=sqlite:////tmp/unused.sqlite3 \
        DJANGO_STATIC_ROOT=/opt/plantstore/static \
        /opt/plantstore/venv/bin/python manage.py collectstatic --no-input -v 0 \
    && /opt/plantstore/venv/bin/python -m compileall -q /opt/plantstore/app

FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 nginx tini ca-certificates \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log /var/cache/debconf/*-old \
        /usr/share/doc/* /usr/share/man/* /usr/share/info/* /usr/share/locale/* \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/plantstore --create-home plantstore
COPY --from=build /opt/plantstore/venv /opt/plantstore/venv
COPY --from=build /opt/plantstore/static /opt/plantstore/static
COPY --from=build /opt/plantstore/app /opt/plantstore/app
WORKDIR /opt/plantstore/app
# Configuration comes from the environment alone (docs/configuration.md); these are the image's
# defaults. DJANGO_SECRET_KEY has none: the service refuses to start without it.
ENV PATH=/opt/plantstore/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PLANTS_LISTEN=0.0.0.0:8000 \
    DJANGO_STATIC_ROOT=/opt/plantstore/static \
    DATABASE_URL=sqlite:////var/lib/plantstore/db.sqlite3
USER plantstore
# No VOLUME: a SQLite database needs a volume mounted on /var/lib/plantstore (docs/deploying.md);
# with PostgreSQL the container keeps nothing, and declares no anonymous volume to leave behind.
EXPOSE 8000
# SIGTERM: deploy/serve.py stops gracefully (nginx stops accepting, in-flight requests are
# answered, Granian's workers get 35 s): give `stop` a grace period of 40 s (compose.yaml does).
STOPSIGNAL SIGTERM
# Liveness: nginx's own /livez, which a database or Redis outage does not fail (a restart would not
# cure it); deploy/serve.py exits when nginx or the app server does. Readiness, /healthz, is the
# balancer's check.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-m", "deploy.probe", "/livez"]
# tini as PID 1 passes signals on and reaps orphans; migrations are a one-off command, never here.
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["python", "-m", "deploy.serve"]
