"""Write the whole site: a page per lesson, an index per part, the home page, the search index and the assets."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ..notebook import NotebookError, read_lesson
from ..paths import lesson_notebooks, repo_root
from ..state_files import write_atomically
from .layout import LessonEntry, home_page, lesson_header, lesson_page, part_page
from .lesson_page import lesson_body
from .search import SEARCH_JS, index_json, index_script
from .style import style_sheet


def default_out() -> Path:
    return repo_root() / "site"  # ignored by git


def build_site(out: Path | None = None, *, say: Callable[[str], None] = print) -> list[Path]:
    """Build the site into `out` from the notebooks as committed (or as they are on disk); returns the pages
    written. A notebook that cannot be read is left out, with a line that says why."""
    out = Path(out) if out is not None else default_out()
    start = time.perf_counter()
    entries = []
    for path in lesson_notebooks():
        try:
            entries.append(LessonEntry(read_lesson(path)))
        except NotebookError as exc:
            say(f"left out: {exc}")
    parts: dict[str, list[LessonEntry]] = {}
    for entry in entries:
        parts.setdefault(entry.lesson.part, []).append(entry)
    written = []

    def write(relative: str, text: str) -> None:
        target = out.joinpath(*relative.split("/"))
        write_atomically(target, text)
        written.append(target)

    for part, members in parts.items():
        for position, entry in enumerate(members):
            previous = members[position - 1] if position else None
            following = members[position + 1] if position + 1 < len(members) else None
            header = lesson_header(entry, previous, following)
            write(entry.href, lesson_page(entry, lesson_body(entry.lesson), header))
        write(f"{part}/index.html", part_page(part, members))
    write("index.html", home_page(parts))
    index = index_json(entries)
    write("search-index.json", index)
    write("search-index.js", index_script(index))
    write("search.js", SEARCH_JS)
    write("site.css", style_sheet())
    say(f"site: {len(entries)} lessons, {len(written)} files in {out} ({time.perf_counter() - start:.1f} s)")
    return written
