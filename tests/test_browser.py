"""The admin and the docs in a real browser (Debian's Chromium, driven by Playwright) on a live production unit (nginx, then the app server)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.db import connections
from playwright.sync_api import sync_playwright

from deploy.processes import ROOT
from plants.models import ApiToken, Plant
from tests.live import PUBLIC_HOST, request
from tests.topologies import TlsProxy

CHROMIUM = os.environ.get("PLANTSTORE_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
# No Chromium service may reach out: the machine has no network, and /docs must not need one.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def static_root(tmp_path) -> Path:
    """collectstatic into a fresh folder, as a deployment does, for WhiteNoise to serve."""
    root = tmp_path / "static"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "plantstore_site.settings", "DJANGO_STATIC_ROOT": str(root)}
    env.setdefault("DJANGO_SECRET_KEY", "collectstatic-only-" + "x" * 40)
    env.pop("DJANGO_DEBUG", None)
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--no-input", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    return root


@pytest.fixture
def site(production_unit, static_root):
    """A production unit behind the TLS proxy, as a person's browser reaches it: its URL at the
    public host name (the browser maps that name to this machine, and trusts the proxy's
    throwaway certificate)."""
    server = production_unit(DJANGO_STATIC_ROOT=str(static_root))
    proxy = TlsProxy(server.port).start()
    yield f"https://{PUBLIC_HOST}:{proxy.port}", server
    proxy.stop()


@pytest.fixture
def browser_page(monkeypatch):
    # Playwright's sync API keeps an event loop running in this thread; the ORM calls the test
    # makes between browser steps are still plain synchronous ones, so Django may allow them.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {PUBLIC_HOST} 127.0.0.1"]
        )
        context = browser.new_context(ignore_https_errors=True)
        outside = []

        def keep_local(route):  # any request off this machine fails the test
            if route.request.url.startswith((f"https://{PUBLIC_HOST}:", "data:", "blob:")):
                return route.continue_()
            outside.append(route.request.url)
            return route.abort()

        context.route("**/*", keep_local)
        page = context.new_page()
        yield page
        # The ORM calls made while its loop ran had connections of their own (Django keeps one per
        # async context): closed here, in that context, or they would outlive the test.
        connections.close_all()
        assert outside == [], f"the pages asked for resources off this machine: {outside}"
        browser.close()


def snapshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / f"{name}.png", full_page=True)


def test_operator_browses_plants_and_manages_tokens_in_the_admin(site, browser_page):
    operator = User.objects.create_superuser("operator", "ops@example.com")
    operator.password = make_password("a-long-operator-password", hasher="pbkdf2_sha256")  # the server's hasher
    operator.save()
    Plant.objects.create(id=42, name="Monstera deliciosa", tag="aroid")
    Plant.objects.create(id=7, name="Pothos", tag="aroid")
    Plant.objects.create(id=100, name="Saguaro", tag="cactus")
    url, server = site
    page = browser_page

    page.goto(f"{url}/admin/")
    snapshot(page, "01-login")
    assert page.locator("link[href*='/static/admin/css/']").count() > 0
    assert request(f"{server.url}{page.locator('link[rel=stylesheet]').first.get_attribute('href')}")[0] == 200
    page.fill("#id_username", "operator")
    page.fill("#id_password", "a-long-operator-password")
    page.click("input[type=submit]")
    page.wait_for_selector("text=Site administration")
    snapshot(page, "02-index")

    page.goto(f"{url}/admin/plants/plant/")
    page.fill("#searchbar", "monstera")
    page.press("#searchbar", "Enter")
    page.wait_for_selector("#result_list")
    snapshot(page, "03-plant-search")
    rows = [row.split() for row in page.locator("#result_list tbody tr").all_inner_texts()]
    assert [row[:3] for row in rows] == [["42", "Monstera", "deliciosa"]]

    page.goto(f"{url}/admin/plants/plant/")
    page.click("#changelist-filter a:text-is('cactus')")
    page.wait_for_url("**tag=cactus**")
    snapshot(page, "04-plant-filter-tag")
    rows = page.locator("#result_list tbody tr").all_inner_texts()
    assert len(rows) == 1 and "Saguaro" in rows[0]

    page.goto(f"{url}/admin/plants/apitoken/add/")
    page.fill("#id_name", "browser-client")
    page.click("input[name=_issue]")
    secret = page.inner_text("#issued-token").strip()
    snapshot(page, "05-token-issued")
    status, _, text = request(f"{server.url}/plants", {"id": 500, "name": "From the browser"}, secret)
    assert (status, text) == (200, '{"id":500,"name":"From the browser"}')

    page.goto(f"{url}/admin/plants/apitoken/")
    assert secret not in page.content()
    token = ApiToken.objects.get(name="browser-client")
    page.check(f"input[name=_selected_action][value='{token.pk}']")
    page.select_option("select[name=action]", "revoke_tokens")
    page.click("button[name=index]")
    page.wait_for_selector("text=Revoked 1 token(s)")
    snapshot(page, "06-token-revoked")
    assert page.locator(".token-revoked").count() == 1
    status, _, text = request(f"{server.url}/plants", {"id": 501, "name": "Too late"}, secret)
    assert (status, text) == (401, '{"error":40101,"message":"The token has been revoked."}')


def test_docs_page_renders_the_schema_without_network(site, browser_page):
    url, _ = site
    page = browser_page

    page.goto(f"{url}/docs")
    page.wait_for_selector(".swagger-ui .opblock-summary-path", timeout=15000)
    snapshot(page, "07-docs")

    assert "/plants" in page.inner_text(".swagger-ui .opblock-summary-path")
    assert "Plant Store" in page.inner_text(".swagger-ui .title")
