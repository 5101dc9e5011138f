"""Config templates (deploy/processes.py: render): @NAME@ placeholders, a mistake on either side an error."""

import re

import pytest

from deploy import unit as deploy_unit
from deploy.processes import ROOT, render
from deploy.unit import render_nginx_conf


def test_a_template_renders_its_placeholders_and_keeps_every_dollar(tmp_path):
    template = tmp_path / "t.conf"
    template.write_text("listen @LISTEN@; proxy_set_header Host $http_host; map $a $b { ~^(\\d+)$ 1; }\n")

    rendered = render(template, tmp_path / "out.conf", LISTEN="127.0.0.1:8000").read_text()

    assert rendered == "listen 127.0.0.1:8000; proxy_set_header Host $http_host; map $a $b { ~^(\\d+)$ 1; }\n"


@pytest.mark.parametrize(
    ("text", "values", "error"),
    [
        ("listen @LISTEN@;", {}, KeyError),  # a placeholder the code does not fill
        ("listen @LISTEN@;", {"LISTEN": "1", "LISTNE": "2"}, KeyError),  # a value the template has no place for
        ("listen @LISTEN;", {"LISTEN": "1"}, KeyError),  # a placeholder not closed
        ("root@host", {}, ValueError),  # a stray at sign
    ],
)
def test_a_placeholder_missing_or_misspelt_on_either_side_is_an_error(tmp_path, text, values, error):
    template = tmp_path / "t.conf"
    template.write_text(text)

    with pytest.raises(error):
        render(template, tmp_path / "out.conf", **values)


def test_the_rendered_nginx_conf_has_no_placeholder_left_and_the_timeouts_asked_for(tmp_path, monkeypatch):
    monkeypatch.setattr(deploy_unit, "UPSTREAM_IDLE_S", 7)
    text = render_nginx_conf(tmp_path, "127.0.0.1:1", "127.0.0.1:2", {}, read_timeout_s=41).read_text()

    assert "@" not in text
    assert re.search(r"(?s)upstream app \{[^}]*keepalive_timeout 7s;", text)
    assert "proxy_read_timeout 41s;" in text
    assert (ROOT / "deploy" / "nginx.conf").read_text().count("$") == text.count("$")


def test_trusted_proxies_take_addresses_networks_and_host_names_looked_up_at_render(tmp_path):
    env = {"PLANTS_TRUSTED_PROXIES": "10.0.0.2, 192.0.2.0/24, localhost"}

    rendered = render_nginx_conf(tmp_path, "unix:/tmp/app.sock", "127.0.0.1:8000", env).read_text()

    trusted = re.findall(r"set_real_ip_from (\S+);", rendered)
    assert trusted[:3] == ["10.0.0.2/32", "192.0.2.0/24", "127.0.0.1/32"]
    assert set(trusted[3:]) <= {"::1/128"}  # localhost's IPv6 address, where the machine names one


def test_a_trusted_proxy_that_is_no_address_and_does_not_resolve_stops_the_start(tmp_path):
    env = {"PLANTS_TRUSTED_PROXIES": "front.invalid"}

    with pytest.raises(
        RuntimeError,
        match="PLANTS_TRUSTED_PROXIES: 'front.invalid' is not an address, a network or a host name that resolves",
    ):
        render_nginx_conf(tmp_path, "unix:/tmp/app.sock", "127.0.0.1:8000", env)


@pytest.mark.parametrize(
    ("listen", "told"), [("0.0.0.0:8000", []), ("127.0.0.1:8000", []), ("192.0.2.10:8000", ["192.0.2.10"])]
)
def test_nginx_tells_which_app_server_it_sends_to_loopback_and_the_one_address_it_listens_on(tmp_path, listen, told):
    rendered = render_nginx_conf(tmp_path, "unix:/tmp/app.sock", listen, {}).read_text()

    on_this_host = re.search(r"geo \$on_this_host \{([^}]*)\}", rendered)[1].split(";")
    assert [entry.split()[0] for entry in on_this_host if entry.strip()][1:] == ["127.0.0.0/8", "::1", *told]


@pytest.mark.parametrize(
    "access_log", ["/var/log/plants-$host.log", "/var/log/plants.log; include /etc/passwd", "/var/log/my plants.log"]
)
def test_an_access_log_path_nginx_would_read_otherwise_stops_the_start(tmp_path, access_log):
    with pytest.raises(RuntimeError, match="PLANTS_ACCESS_LOG: .* which nginx's config would not read as written"):
        render_nginx_conf(tmp_path, "unix:/tmp/app.sock", "127.0.0.1:8000", {"PLANTS_ACCESS_LOG": access_log})
    assert not (tmp_path / "nginx.conf").exists()


def test_a_unit_folder_with_a_dollar_in_its_path_stops_the_start(tmp_path):
    # TMPDIR's: the unit's folder is in nginx's paths, its socket also in /_edge/upstream's answer.
    with pytest.raises(RuntimeError, match="the unit's folder: .*'\\$'"):
        render_nginx_conf(tmp_path / "a$b", f"unix:{tmp_path}/a$b/app.sock", "127.0.0.1:8000", {})
