"""The settings file DJANGO_ENV_FILE names: `NAME=value` lines, blank lines and `#` comments, in UTF-8.

django-environ reads it for the settings (plantstore_site/settings.py) and for a unit's supervisor
(deploy/processes.py: with_env_file), but it reads a file it cannot open as an empty one, and skips a
line it cannot parse, both without a word: a moved file, or a `NAME = value` line, would drop a
setting, an admin client list say, from a start or a reload. And the systemd install's units read the
same file by systemd's EnvironmentFile=, which reads `NAME = value` and indented lines, drops `export
NAME=...`, and joins a line ending in a backslash to the next: the slot, the edge file (a copy of
its lines) and make serve would each see other settings. So the file is checked first, and only lines
both read alike pass; any other is refused naming the file and the line (never the value: it may be
a secret): at a start, a reload, and by the systemd install's release before it changes anything
(`python -m plantstore_site.env_file FILE`, deploy/plantstore-release).
"""

import re
import sys
from pathlib import Path

# A line both read alike as a setting: django-environ's pattern without its `export ` (systemd would
# read `export NAME` as the name), its value not ending in a backslash (systemd joins the next line to
# it) nor in a space (systemd drops it, django-environ keeps it).
SETTING = re.compile(r"\A[A-Za-z_][A-Za-z_0-9]*=(.*[^\s\\])?\Z")
# What the line was meant to be: a name, maybe exported, maybe with spaces around it.
MEANT_SETTING = re.compile(r"\A\s*(export\s+)?([A-Za-z_][A-Za-z_0-9]*)\s*=(.*)\Z")


def problem(path: str) -> str | None:
    """Why the settings file at `path` cannot be read as written, in one line naming it; None when it can."""
    try:
        content = Path(path).read_bytes()
    except OSError as error:
        return f"{path} cannot be read ({error.strerror})"
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as error:
        line = content[: error.start].count(b"\n") + 1
        return f"{path}, line {line}, is not UTF-8 (save the file as UTF-8)"
    if text.startswith("\ufeff"):  # a byte order mark, which an editor may write first: line 1 would be skipped
        return f"{path} begins with a byte order mark (save the file as UTF-8 without one)"
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#") or SETTING.match(line):
            continue
        if not (meant := MEANT_SETTING.match(line)):
            return f"{path}, line {number}, is not NAME=value, a # comment or blank"
        exported, name, value = meant.groups()
        why = (
            "no export before the name" if exported
            else "no space before the name or around =" if line != f"{name}={value}"
            else "no backslash or space at the end of the value"
        )  # fmt: skip
        return f"{path}, line {number} ({name}), is not NAME=value: {why}"
    return None


if __name__ == "__main__":
    # python -m plantstore_site.env_file FILE: silent and 0 when FILE can be read as written; else the reason, 1.
    if reason := problem(sys.argv[1]):
        sys.exit(reason)
