"""The docs hold together: links and anchors resolve, the configuration reference matches the code,
the make targets named exist and docs/development.md lists them all, the metrics queried exist, and
the front pages stay within their budgets."""

import re
import unicodedata
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").rglob("*.md"))]
CONFIGURATION = ROOT / "docs" / "configuration.md"

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.MULTILINE)
# How the code reads a variable: os.environ.get("X"), environ["X"], env.int("X"), env_bool("X"),
# setting(env, "X") in Python, and os.environ.setdefault("X", ...), which gives a library's variable
# our default; ${X:-default} in the shell scripts.
PYTHON_READ = re.compile(
    r"""(?:environ\.get|environ\.pop|environ\.setdefault|getenv|env\.(?:str|bool|int|list|get)|env_bool|setting\(env,|networks\(env,)\(?\s*"([A-Z][A-Z0-9_]+)"|"""
    r"""environ\["([A-Z][A-Z0-9_]+)"\]"""
)
SHELL_READ = re.compile(r"\$\{([A-Z][A-Z0-9_]+)(?::-|-|:=)")
# The shell's, the system's and Django's own, which the code reads but nobody configures for this
# service (wsgi.py names its settings module as Django's project template does).
# Set by the system or a tool, not by an operator: pytest-xdist names each worker and their count.
SYSTEM_VARIABLES = {"TERM", "TMPDIR", "PATH", "HOME", "DJANGO_SETTINGS_MODULE"} | {
    "PYTEST_XDIST_WORKER",
    "PYTEST_XDIST_WORKER_COUNT",
}
PROMQL_BLOCK = re.compile(r"^```promql\n(.*?)^```", re.MULTILINE | re.DOTALL)
# What in a PromQL expression is not a metric name: comments, strings, label matchers, ranges, and
# the label lists of by, without, on, ignoring and group_left/right. Of what is left, a name followed
# by "(" is a function or an aggregation, and a few words are operators.
PROMQL_NOT_NAMES = re.compile(
    r"""#.*|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\{[^}]*\}|\[[^\]]*\]"""
    r"|\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"
)
PROMQL_NAME = re.compile(r"(?<![\w.:])[a-zA-Z_:][\w:]*\b(?!\s*\()")
PROMQL_OPERATORS = {"and", "or", "unless", "offset", "bool", "inf", "nan"}
METRICS_TOKEN = "docs-" + "m" * 40


def text_outside_code(page: Path) -> str:
    return FENCE.sub("", page.read_text())


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[|\]\([^)]*\)", "", heading).strip().lower()
    text = "".join(char for char in text if char in "-_ " or unicodedata.category(char)[0] in "LN")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for heading in HEADING.findall(text_outside_code(page)):
        name = anchor(heading)
        result.add(name if name not in seen else f"{name}-{seen[name]}")
        seen[name] = seen.get(name, 0) + 1
    return result


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(text_outside_code(page)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not ours to check
            continue
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target} (no heading #{fragment} in {linked.relative_to(ROOT)})")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_and_anchor_in_the_docs_resolves(page):
    assert broken_links(page) == [], f"{page.relative_to(ROOT)} links to what is not there"


def variables_read_by_the_code() -> set[str]:
    names = set()
    for folder in ("plantstore_site", "plants", "deploy", "scripts", "localcluster"):
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file() or path.suffix not in {".py", ""} or "migrations" in path.parts:
                continue
            text = path.read_text(errors="replace")
            names |= {a or b for a, b in PYTHON_READ.findall(text)}
            names |= set(SHELL_READ.findall(text))
    return names - SYSTEM_VARIABLES


def variables_in_the_reference() -> set[str]:
    rows = [line for line in CONFIGURATION.read_text().splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def test_every_variable_the_code_reads_is_in_the_configuration_reference():
    missing = variables_read_by_the_code() - variables_in_the_reference()

    assert not missing, f"read by the code but not in docs/configuration.md: {sorted(missing)}"


def test_every_variable_in_the_configuration_reference_is_read_by_the_code():
    unread = variables_in_the_reference() - variables_read_by_the_code()

    assert not unread, f"in docs/configuration.md but read nowhere: {sorted(unread)}"


def test_every_make_target_the_docs_name_exists():
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    named = {name for page in PAGES for name in re.findall(r"`make ([a-z][a-z0-9-]*)", page.read_text())}

    assert named - targets == set(), f"make targets the docs name that the Makefile lacks: {sorted(named - targets)}"


def test_development_page_lists_every_target_make_help_lists():
    makefile, page = (ROOT / "Makefile").read_text(), (ROOT / "docs" / "development.md").read_text()
    described = set(re.findall(r"^([a-z][a-z0-9-]*):.*## ", makefile, re.MULTILINE))
    section = page[page.index("## Make targets") :].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([a-z][a-z0-9-]*)`", section))

    assert described - listed == set(), f"docs/development.md's Make targets lacks: {sorted(described - listed)}"


def metric_names_queried(page: Path) -> set[str]:
    queries = "\n".join(PROMQL_BLOCK.findall(page.read_text()))
    return set(PROMQL_NAME.findall(PROMQL_NOT_NAMES.sub(" ", queries))) - PROMQL_OPERATORS


@pytest.fixture
def exposed_metric_names(client, settings) -> set[str]:
    """The series names the service's /metrics answers with, once a request has been counted."""
    settings.PLANTS_METRICS_TOKEN = METRICS_TOKEN
    client.get("/livez")
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
    assert response.status_code == 200
    samples = {sample.name for family in text_string_to_metric_families(response.text) for sample in family.samples}
    # In process, the registry also holds the process' own process_* and python_* metrics and each
    # counter's _created; production's /metrics, prometheus-client's multiprocess collector, has none.
    return {name for name in samples if name.startswith("plants_") and not name.endswith("_created")}


def test_every_metric_the_docs_query_is_one_the_service_exposes(exposed_metric_names):
    queried = {name: page for page in PAGES for name in metric_names_queried(page)}
    unknown = {name: str(page.relative_to(ROOT)) for name, page in queried.items() if name not in exposed_metric_names}

    assert queried, "no ```promql block found in the docs: this test checks nothing"
    assert unknown == {}, f"queried in the docs but not exposed by /metrics: {unknown}"


@pytest.mark.parametrize("page", ["README.md", "BENCHMARKS.md"])
def test_front_pages_stay_within_200_lines(page):
    lines = len((ROOT / page).read_text().splitlines())

    assert lines <= 200, f"{page} is {lines} lines; move the detail to a docs page"


def test_no_page_or_source_file_refers_to_an_issue_number():
    pattern = re.compile(r"\bissues? #?\d+\b", re.IGNORECASE)
    files = [
        *PAGES,
        *(
            path
            for folder in ("plants", "plantstore_site", "deploy", "bench", "scripts", "tests")
            for path in (ROOT / folder).rglob("*.py")
        ),
    ]
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]

    assert found == [], f"name the thing itself, not an issue number: {found}"


CATALOG_ROW = re.compile(r"^\| (\d{5}) \| ([A-Z_]+) \| (\d{3}) \|", re.MULTILINE)


def test_the_error_catalog_in_the_api_docs_is_the_code_s_own():
    from plants.exceptions import ErrorCode

    documented = CATALOG_ROW.findall((ROOT / "docs" / "api.md").read_text())

    assert sorted(documented) == sorted((str(code.value), code.name, str(code.value // 100)) for code in ErrorCode)


def catalog_rows() -> dict[str, str]:
    """docs/api.md's catalog: each code's "When" cell, by code."""
    rows = re.findall(
        r"^\| (\d{5}) \| [A-Z_]+ \| \d{3} \| (.*) \|$", (ROOT / "docs" / "api.md").read_text(), re.MULTILINE
    )
    return dict(rows)


def test_each_catalog_row_in_the_api_docs_says_when_in_the_catalog_s_own_words():
    """The "When" cell opens with the code's description, as the schema publishes it; the page may add to it."""
    from plants.exceptions import ERROR_CODE_DESCRIPTIONS

    cells = catalog_rows()
    differ = {
        code.name: description
        for code, description in ERROR_CODE_DESCRIPTIONS.items()
        if not cells.get(str(code.value), "").startswith(description)
    }

    assert differ == {}, f"docs/api.md's catalog rows should open with plants/exceptions.py's words: {differ}"


def fields_cell() -> str:
    page = (ROOT / "docs" / "api.md").read_text()
    return re.search(r"^\| Fields \| (.*) \|$", page, re.MULTILINE).group(1)


def in_a_sentence(text: str) -> str:
    """ "Must be one word." as the page may say it inside a sentence: "must be one word"."""
    return text[0].lower() + text[1:].rstrip(".")


def test_the_fields_row_of_the_api_docs_states_each_field_s_rules_as_the_serializer_does():
    """Each NewPlant field, required or optional, its bounds, and every rule of its own with its message."""
    from django.core.validators import RegexValidator

    from plants.serializers import INT64_MAX, INT64_MIN, NewPlantSerializer, StrictCharField, StrictIntegerField

    cell, fields = fields_cell(), NewPlantSerializer().fields
    expected = []
    for name, field in fields.items():
        said = f"`{name}`: {'required' if field.required else 'optional'}, "
        if isinstance(field, StrictCharField):
            said += f"{field.min_length}–{field.max_length} characters"
            own = [str(rule.message) for rule in field.validators if isinstance(rule, RegexValidator)]
            expected += [in_a_sentence(rules) for rules in [field.rules, *own]]
        elif isinstance(field, StrictIntegerField) and (field.min_value, field.max_value) == (INT64_MIN, INT64_MAX):
            said += "a JSON integer in the int64 range"
        expected.append(said)

    assert re.findall(r"`(\w+)`: ", cell) == list(fields), "one sentence per field, in the serializer's order"
    assert [text for text in expected if text not in cell] == []


# A row's second column: a file, then what in it holds the rule; `;` starts another file.
NAMED_IN_A_ROW = re.compile(r"`([^`]+)`")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?")


def defines(text: str, name: str) -> bool:
    return bool(re.search(rf"^\s*(?:(?:async )?def|class) {name}\b|^\s*{name}\s*(?::[^=]*)?=", text, re.MULTILINE))


def unresolved_places(row: str) -> list[str]:
    unresolved, text = [], None
    for named in NAMED_IN_A_ROW.findall(row):
        if (ROOT / named).exists():
            text = (ROOT / named).read_text() if (ROOT / named).is_file() else ""
        elif "/" in named or re.search(r"\.(?:py|ya?ml|conf|md|txt|toml)$", named):
            unresolved.append(f"{named} (no such file)")
        elif IDENTIFIER.fullmatch(named) and not (text and all(defines(text, part) for part in named.split("."))):
            unresolved.append(f"{named} (not defined in the file named before it)")
    return unresolved


def test_each_place_where_a_rule_lives_is_in_the_code():
    """docs/development.md's "Where each rule lives": every file named exists and defines what the row names."""
    page = (ROOT / "docs" / "development.md").read_text()
    section = page[page.index("## Where each rule lives") :].split("\n## ", 1)[0]
    rows = [line.split(" | ")[1] for line in section.splitlines() if line.startswith("| ") and " | `" in line]

    assert len(rows) > 20, "the table was not found"
    assert {row: unresolved_places(row) for row in rows if unresolved_places(row)} == {}


def unit_file(name: str) -> dict[str, str]:
    """The settings of deploy/systemd/`name` (the last of each name)."""
    lines = (ROOT / "deploy" / "systemd" / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if re.match(r"[A-Z]\w*=", line))


def test_what_deploying_md_says_of_the_units_and_the_release_script_is_what_their_files_hold():
    """The paths, modes, signals and timeouts docs/deploying.md states of the systemd install, each
    written here from the file that holds it (a unit, the release script, deploy/'s constants): a
    changed value no longer finds its sentence. The release script writes where the units read."""
    from deploy.app_server import WORKER_STOP_S
    from deploy.unit import NGINX_SHUTDOWN_S, NGINX_SWITCH_S

    page = " ".join((ROOT / "docs" / "deploying.md").read_text().split())
    script = (ROOT / "deploy" / "plantstore-release").read_text()
    app, nginx = unit_file("plantstore-app@.service"), unit_file("plantstore-nginx.service")
    socket, link, copy = app["ExecStart"].split()[-1], app["WorkingDirectory"], app["EnvironmentFile"]
    copy_mode = re.search(rf'install -m (\d+) "\$settings" "{re.escape(copy.replace("%i", "$new"))}"', script)[1]
    # The slot's socket: deploy/app_server.py's command, as the unit's ExecStart= runs it.
    socket_mode = re.search(r'socket_mode="0o(\d+)"', (ROOT / "deploy" / "app_server.py").read_text())[1]
    settings_file = re.search(r"^settings=(\S+)$", script, re.M)[1]
    stated = [
        f"on `{socket.replace('%i', 'a')}` (or `b`)",
        f"(`PLANTS_APP_SLOT` in `{nginx['EnvironmentFile']}`",
        f"the socket `0{socket_mode}`, its folder `{app['RuntimeDirectoryMode']}`",
        f"but for `/var/lib/{app['StateDirectory']}` (a SQLite database",
        f"`{settings_file}` holds the [configuration]",
        f"the link `{link.replace('%i', 'b')}` (or `a`) to the release's folder",
        f"`{copy.replace('%i', 'b')}`, a copy of the settings file (root's alone, 0{copy_mode})",
        f"nginx first (`{nginx['KillSignal']}`: it answers what it holds, closing what is left after {NGINX_SHUTDOWN_S} s)",
        f"`KillMode={app['KillMode']}`: its workers finish their requests, {WORKER_STOP_S} s at most",
        f"systemd starts that one again (`Restart={app['Restart']}`)",
        f"nginx's master held past the switch's {NGINX_SWITCH_S} s",
        f"drains what it holds, up to {NGINX_SHUTDOWN_S} s, then the slot its requests",
    ]

    assert [sentence for sentence in stated if sentence not in page] == []
    # The script writes what the units read: the slot's link and settings, and nginx's file.
    assert (nginx["Restart"], f"edge_file={nginx['EnvironmentFile']}" in script) == (app["Restart"], True)
    assert f'"{link.replace("%i", "$new")}"' in script and f'"{copy.replace("%i", "$new")}"' in script


def test_the_supervisor_record_counts_deploy_s_python_as_it_is():
    lines = {path.name: len(path.read_text().splitlines()) for path in (ROOT / "deploy").glob("*.py")}
    total, database = sum(lines.values()), lines["switchover.py"] + lines["standby_guard.py"]
    page = " ".join((ROOT / "docs" / "decisions" / "supervisor.md").read_text().split())

    assert f"`deploy/`'s Python is {total:,} lines (`wc -l deploy/*.py`" in page
    assert f"(`switchover.py`, `standby_guard.py`: {database} of them" in page
    # The figure when nginx had two ways to switch (1,008 lines): the standby guard came later.
    assert f"{total - lines['standby_guard.py']:,} without `standby_guard.py`" in page
