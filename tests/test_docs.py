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
SYSTEM_VARIABLES = {"TERM", "TMPDIR", "PATH", "HOME", "DJANGO_SETTINGS_MODULE"}
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
