"""The operator's pages run as written on the systemd host: pytest-codeblocks runs their shell blocks there.

The pages are docs/deploying.md, docs/operating.md and README.md. The runner is pytest with
pytest-codeblocks (tests/requirements-docs.txt), in a venv of its own on the host (/opt/docs-runner,
from the host's wheelhouse), run there as root, from root's home, /root (the README's blocks from a
developer's checkout, /root/plantstore). Its rules:

- One substitution: `<this repository>` becomes the host's repository, /srv/plantstore (a git
  repository of the checkout under test); nothing else in a page is changed.
- A block is a ```bash fence; pytest-codeblocks runs each in a bash of its own (its variables and
  `cd` end with it: a block that continues one, `<!--pytest-codeblocks:cont-->`, runs in its shell),
  with errexit and pipefail set by BASH_ENV: the first command that fails fails its block, as an
  operator stops at the first error. Its standard input is empty; its output, when a block shows it
  (`<!--pytest-codeblocks:expected-output-->`), must be exactly that.
- A block marked `<!--pytest.mark.skip(reason="...")-->` cannot run there, for that reason: the
  blocks so marked are listed in docs/development.md.

The blocks run in the order an operator follows them, the test module running each at its step
(between them it plays the operator's editor and the clients); every block runs once, and the last
run asserts that each passed, the marked ones alone skipped.
"""

import re
import shlex
import xml.etree.ElementTree as ElementTree

from deploy.processes import ROOT
from tests.systemd_host import REPOSITORY, SystemdHost

PAGES = {"deploying.md": ROOT / "docs" / "deploying.md", "operating.md": ROOT / "docs" / "operating.md"}
PAGES["README.md"] = ROOT / "README.md"
PLACEHOLDER = "<this repository>"
RUNNER = "/opt/docs-runner"
FOLDER = "/var/tmp/operator-docs"  # the pages as the runner reads them, its plugin and its results
CHECKOUT = "/root/plantstore"  # the README's developer's checkout, where `make run` serves
# Loaded by bash before each block (BASH_ENV), then unset, so that the scripts a block runs start as usual.
ERREXIT = "set -e -o pipefail\nunset BASH_ENV\n"
SKIP_MARK = re.compile(r'^\s*<!--\s*pytest\.mark\.skip\(reason="([^"]*)"\)\s*-->\s*$', re.MULTILINE)


def skip_reasons() -> list[str]:
    """The reasons of the blocks marked as unable to run on the host, in the pages' order."""
    return [reason for page in PAGES.values() for reason in SKIP_MARK.findall(page.read_text())]


class OperatorDocs:
    """The runner on the host, and what each block it ran came to: {node id: (outcome, message)},
    a node id being pytest-codeblocks' `PAGE::line N`, N the line of the block's opening fence."""

    def __init__(self, host: SystemdHost):
        self.host = host
        self.results: dict[str, tuple[str, str]] = {}
        self.runs = 0

    def install(self) -> "OperatorDocs":
        """The runner's venv; its BASH_ENV file, its conftest and the pages with `<this repository>`
        replaced, each sent on its own standard input (together they pass the kernel's 128 KiB bound
        on one argument)."""
        files = {
            "errexit.bash": ERREXIT,
            "conftest.py": (ROOT / "tests" / "operator_docs_plugin.py").read_text(),
            **{name: page.read_text().replace(PLACEHOLDER, REPOSITORY) for name, page in PAGES.items()},
        }
        self.host.run(
            f"python3 -m venv {RUNNER} && {RUNNER}/bin/pip install -q -r {REPOSITORY}/tests/requirements-docs.txt"
            f" && install -d -m 700 {FOLDER}"
        )
        for name, text in files.items():
            self.host.run(f"cat >{FOLDER}/{name}", input=text)
        return self

    def collected(self) -> list[str]:
        """Every block's node id, in the pages' order."""
        listed = self.inner_pytest("--collect-only -q", *PAGES).stdout
        return [line for line in listed.splitlines() if "::line " in line]

    def node(self, page: str, text: str) -> str:
        """The node id of the block of `page` in which `text` is, by the line of its opening fence."""
        lines = PAGES[page].read_text().splitlines()
        [found] = [index for index, line in enumerate(lines) if text in line]
        opening = next(index for index in range(found, -1, -1) if lines[index].lstrip().startswith("```"))
        return f"{page}::line {opening + 1}"

    def run(self, page: str, *texts: str, check: bool = True) -> dict[str, tuple[str, str]]:
        """Run the blocks of `page` holding `texts` (each a text of its own block), in that order:
        {node id: (outcome, message)}; with `check`, an AssertionError showing a failed block's output."""
        return self.run_nodes([self.node(page, text) for text in texts], check=check)

    def run_nodes(self, nodes: list[str], check: bool = True) -> dict[str, tuple[str, str]]:
        if not nodes:
            return {}
        self.runs += 1
        report = f"{FOLDER}/results-{self.runs}.xml"
        done = self.inner_pytest(f"-rA --junitxml={report}", *nodes)
        junit = self.host.run(f"cat {report}", check=False).stdout  # none if pytest did not start
        results = self.outcomes(junit) if junit else {}
        self.results.update(results)
        failed = {node: message for node, (outcome, message) in results.items() if outcome == "failed"}
        if check and (failed or set(results) != set(nodes)):
            raise AssertionError(
                f"the docs' blocks {nodes}: exit {done.returncode}\n"
                + "\n".join(f"{node}:\n{message}" for node, message in failed.items())
                + f"\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        return results

    def inner_pytest(self, options: str, *nodes: str):
        arguments = " ".join(shlex.quote(f"{FOLDER}/{node}") for node in nodes)
        # From the folder the blocks assume: root's home, or for the README's a developer's checkout.
        folder = CHECKOUT if nodes and all(node.startswith("README.md") for node in nodes) else "/root"
        return self.host.run(
            f"cd {folder} && BASH_ENV={FOLDER}/errexit.bash {RUNNER}/bin/pytest --codeblocks -p no:cacheprovider"
            f" --rootdir={FOLDER} {options} {arguments}",
            check=False,
            timeout=600,
        )

    @staticmethod
    def outcomes(junit: str) -> dict[str, tuple[str, str]]:
        """{node id: (passed, failed or skipped, its message)} of pytest's junit XML."""
        results = {}
        for case in ElementTree.fromstring(junit).iter("testcase"):
            node = f"{case.get('classname')}::{case.get('name')}"
            outcome, message = "passed", ""
            for child in case:
                if child.tag in ("failure", "error"):
                    outcome, message = "failed", child.text or child.get("message", "")
                elif child.tag == "skipped":
                    outcome, message = "skipped", child.get("message", "")
            results[node] = (outcome, message)
        return results
