"""The pages around the lessons: the frame every page shares (style sheet, search box, navigation), the home page
with every lesson, and one index page per part."""

from __future__ import annotations

import html
from dataclasses import dataclass

from ..authoring.part_index import PARTS
from ..colab import colab_url
from ..notebook import Lesson
from ..paths import repo_root


@dataclass(frozen=True)
class LessonEntry:
    """A lesson as the site lists it."""

    lesson: Lesson

    @property
    def href(self) -> str:  # from the site's root
        return f"{self.lesson.part}/{self.lesson.path.stem}.html"

    @property
    def title(self) -> str:
        return _title(self.lesson, "en")

    @property
    def title_zh(self) -> str:
        return _title(self.lesson, "zh")

    @property
    def notebook_path(self) -> str:
        return self.lesson.path.resolve().relative_to(repo_root()).as_posix()

    @property
    def colab_url(self) -> str:
        return f"{colab_url()}/{self.notebook_path}"


def _title(lesson: Lesson, language: str) -> str:
    title = lesson.meta.get("title")
    return str(title.get(language, "") if isinstance(title, dict) else title or lesson.id) or lesson.id


def part_title(part: str) -> str:
    english, chinese = PARTS.get(part, (part, ""))
    return f"{english} | {chinese}" if chinese else english


def page(title: str, body: str, *, depth: int, crumbs: list[tuple[str, str]]) -> str:
    """A whole HTML page; `depth` is how many folders below the site's root it lies (links are relative, so the
    site works from a folder on disk as well as from a web server)."""
    up = "../" * depth
    trail = " › ".join(f"<a href='{up}{href}'>{html.escape(text)}</a>" for text, href in crumbs)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)} · LLM Algo Lab</title><link rel="stylesheet" href="{up}site.css"></head>
<body data-root="{up}"><header><nav class="crumbs">{trail}</nav>
<input id="search" type="search" placeholder="Search lessons… 搜索课程" autocomplete="off" aria-label="Search lessons">
<ol id="search-results"></ol></header>
<main>{body}</main>
<script src="{up}search-index.js"></script><script src="{up}search.js"></script></body></html>
"""


def lesson_header(entry: LessonEntry, previous: LessonEntry | None, following: LessonEntry | None) -> str:
    """Above the lesson: the Open-in-Colab badge, its facts, and the lessons before and after it."""
    meta = entry.lesson.meta
    facts = " · ".join(
        html.escape(str(value))
        for value in (entry.lesson.id, meta.get("difficulty"), meta.get("device"), f"{meta.get('minutes', '?')} min")
    )
    links = [
        f"<a class='colab-badge' href='{html.escape(entry.colab_url)}'>Open in Colab</a>",
        f"<span class='facts'>{facts}</span>",
    ]
    if previous is not None:
        links.append(f"<a rel='prev' href='../{previous.href}'>← {html.escape(previous.title)}</a>")
    if following is not None:
        links.append(f"<a rel='next' href='../{following.href}'>{html.escape(following.title)} →</a>")
    return f"<div class='lesson-bar'>{' '.join(links)}</div>"


def lesson_list(entries: list[LessonEntry], *, depth: int) -> str:
    up = "../" * depth
    rows = "".join(
        f"<li><a href='{up}{e.href}'>{html.escape(e.title)}</a> <span class='zh'>{html.escape(e.title_zh)}</span> "
        f"<code>{html.escape(e.lesson.id)}</code> <span class='facts'>{html.escape(str(e.lesson.meta.get('minutes', '?')))}"
        " min</span></li>"
        for e in entries
    )
    return f"<ol class='lessons'>{rows}</ol>"


def home_page(parts: dict[str, list[LessonEntry]]) -> str:
    sections = "".join(
        f"<section><h2><a href='{part}/index.html'>{html.escape(part_title(part))}</a></h2>"
        f"{lesson_list(entries, depth=0)}</section>"
        for part, entries in parts.items()
    )
    count = sum(len(entries) for entries in parts.values())
    body = (
        "<h1>LLM Algo Lab | LLM 算法实验室</h1><p>Learn how large language models work by implementing them: "
        f"{count} lessons, each a notebook with exercises graded automatically.</p>{sections}"
    )
    return page("Lessons", body, depth=0, crumbs=[("LLM Algo Lab", "index.html")])


def part_page(part: str, entries: list[LessonEntry]) -> str:
    body = f"<h1>{html.escape(part_title(part))}</h1>{lesson_list(entries, depth=1)}"
    crumbs = [("LLM Algo Lab", "index.html"), (part, f"{part}/index.html")]
    return page(part_title(part), body, depth=1, crumbs=crumbs)


def lesson_page(entry: LessonEntry, body: str, header: str) -> str:
    part = entry.lesson.part
    crumbs = [("LLM Algo Lab", "index.html"), (part, f"{part}/index.html"), (entry.title, entry.href)]
    return page(entry.title, header + body, depth=1, crumbs=crumbs)
