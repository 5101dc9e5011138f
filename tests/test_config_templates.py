"""Config templates (deploy/processes.py: render): @NAME@ placeholders, a mistake on either side an error."""

import re
from collections import Counter

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


def nginx_directives(text: str) -> Counter:
    """Each line of nginx config without its comment and indent, counted: a rule moved is the same rule."""
    lines = (line.split("#")[0].strip() for line in text.splitlines())
    return Counter(line for line in lines if line)


def test_the_alternative_s_nginx_site_holds_every_rule_of_the_unit_s_nginx_conf():
    """deploy/alternative/nginx-site.conf (docs/decisions/supervisor.md: the usual alternative) is the
    template's http block for Debian's nginx: what was measured there is the unit's edge."""
    template = (ROOT / "deploy" / "nginx.conf").read_text()
    http_block = template[template.index("\nhttp {\n") + 8 : template.rindex("}")]
    unit_rules = nginx_directives(
        http_block.replace("@UPSTREAM_IDLE@", f"{deploy_unit.UPSTREAM_IDLE_S}s")
        .replace("@READ_TIMEOUT@", f"{deploy_unit.READ_TIMEOUT_S}s")
        .replace("@ACCESS_LOG@", "syslog:server=unix:/dev/log,nohostname")
    )
    site_rules = nginx_directives((ROOT / "deploy" / "alternative" / "nginx-site.conf").read_text())

    # Debian's temp folders in place of the unit's; its error log (main context there) to the journal.
    assert unit_rules - site_rules == Counter(
        f"{name}_temp_path @RUN_DIR@/{name};" for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    assert site_rules - unit_rules == Counter(["error_log syslog:server=unix:/dev/log,nohostname crit;"])
