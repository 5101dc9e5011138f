"""BENCHMARKS.md: each benchmark rewrites only its own section, between markers naming it."""

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"


def write_section(writer: str, text: str) -> None:
    """Put `text` between `writer`'s markers, keeping everything around them (appended if new)."""
    begin, end = f"<!-- written by {writer}: begin -->", f"<!-- written by {writer}: end -->"
    document = BENCHMARKS.read_text()
    section = f"{begin}\n{text.strip()}\n{end}"
    if begin in document and end in document:
        document = document[: document.index(begin)] + section + document[document.index(end) + len(end) :]
    else:
        document = document.rstrip() + "\n\n" + section + "\n"
    BENCHMARKS.write_text(document)
