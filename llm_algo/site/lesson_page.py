"""One lesson as the body of a web page: the notebook through nbconvert's HTMLExporter, with each check cell shown as
what it checks (from the lesson's checks module, read without torch), each reference solution folded in a
`<details>`, and badge images (which a browser would fetch from the network) turned into plain links."""

from __future__ import annotations

import copy
import html
import posixpath
import re
from functools import cache

from ..check_index import DeclaredCheck, declared_checks
from ..colab import branch, repository
from ..notebook import Cell, Lesson
from ..paths import checks_module_path, display_path

TITLE_LINE = re.compile(r"^#@title\s*(.*)\n?")  # Colab's form view: the collapsed solution's caption
LINKED_BADGE = re.compile(r"\[!\[([^\]]*)\]\([^)]*\)\]\(([^)\s]*)\)")  # [![alt](image)](link) -> [alt](link)
BADGE = re.compile(r"!\[([^\]]*)\]\(https?://[^)]*\)")  # ![alt](remote image) -> `alt`
NOTEBOOK_HREF = re.compile(r'href="(?![a-z]+:|#|/)([^"#]*?)\.ipynb(#[^"]*)?"')  # a relative link to a notebook
README_HREF = re.compile(r'href="(?![a-z]+:|#|/)((?:[^"#]*/)?)README\.md"')  # a part's index
OTHER_HREF = re.compile(r'href="(?![a-z]+:|#|/)([^"#]*?(?<!\.html))(#[^"]*)?"')  # any other file of the repository


@cache
def exporter():
    from nbconvert import HTMLExporter

    return HTMLExporter(template_name="basic", exclude_input_prompt=True, exclude_output_prompt=True)


def lesson_body(lesson: Lesson) -> str:
    """The lesson's cells as HTML; links to other notebooks point at their pages."""
    notebook = copy.deepcopy(lesson.notebook)
    checks = declared_checks(lesson.id)
    replacements = {}  # placeholder -> HTML: nbconvert sanitises raw HTML cells (no <details>), so swap in after
    for raw, cell in zip(notebook.cells, lesson.cells, strict=True):
        if cell.tag in ("check", "solution"):
            placeholder = f"LLM-ALGO-CELL-{cell.index}"
            replacements[f"<p>{placeholder}</p>"] = (
                check_cell_html(lesson, cell.exercise or "", checks) if cell.tag == "check" else solution_html(cell)
            )
            raw.cell_type, raw.source, raw.metadata = "markdown", placeholder, {}
            for key in ("outputs", "execution_count"):
                raw.pop(key, None)
        elif cell.cell_type == "markdown":
            raw.source = offline_markdown(cell.source)
        elif cell.cell_type == "code":
            raw.outputs = []  # committed notebooks are stripped; a learner's copy may not be
    body, _ = exporter().from_notebook_node(notebook)
    for placeholder, replacement in replacements.items():
        body = body.replace(placeholder, replacement)
    return page_links(body, lesson.part)


def check_cell_html(lesson: Lesson, exercise: str, checks: list[DeclaredCheck] | None) -> str:
    """What `check("name")` runs, in words: one line per check, its docstring's first line."""
    mine = [c for c in checks or () if c.exercise == exercise]
    head = f"<p>✔ <b>checks <code>{html.escape(exercise)}</code></b>"
    if not mine:
        where = display_path(checks_module_path(lesson.id))
        return f"<div class='llm-check'>{head}: see <code>{html.escape(where)}</code></p></div>"
    items = "".join(f"<li>{html.escape(c.description)}</li>" for c in mine)
    return f"<div class='llm-check'>{head} ({len(mine)} checks):</p><ul>{items}</ul></div>"


def solution_html(cell: Cell) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    title = TITLE_LINE.match(cell.source)
    caption = title.group(1).strip() if title else f"Reference solution: {cell.solution}"
    code = TITLE_LINE.sub("", cell.source, count=1)
    highlighted = highlight(code, PythonLexer(), HtmlFormatter(cssclass="highlight hl-python"))
    return f"<details class='llm-solution'><summary>{html.escape(caption)}</summary>{highlighted}</details>"


def offline_markdown(source: str) -> str:
    """Badges are images on shields.io and colab.research.google.com: keep their words, not the image."""
    return BADGE.sub(lambda m: f"`{m.group(1)}`", LINKED_BADGE.sub(r"[\1](\2)", source))


def page_links(body: str, part: str) -> str:
    """`02_RMSNorm.ipynb` -> `02_RMSNorm.html`, a part's `README.md` -> its `index.html`; a link to any other file
    of the repository (a lesson's source, its checks) -> that file on the repository's web page."""
    body = NOTEBOOK_HREF.sub(lambda m: f'href="{m.group(1)}.html{m.group(2) or ""}"', body)
    body = README_HREF.sub(lambda m: f'href="{m.group(1)}index.html"', body)

    def on_the_web(match: re.Match) -> str:
        path = posixpath.normpath(posixpath.join(part, match.group(1)))
        return f'href="{repository()}/blob/{branch()}/{path}{match.group(2) or ""}"'

    return OTHER_HREF.sub(on_the_web, body)
