"""`python -m llm_algo site`: the course website built from a tiny lab, read back with the standard library's HTML
parser: pages exist, solutions are folded, check cells say what they check, badges and links lead somewhere."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tiny_lab import PART, Lab


class Page(HTMLParser):
    """What a test needs from one page: its links, the text inside <details>, and the text of each element by
    class."""

    def __init__(self, path: Path):
        super().__init__()
        self.links: list[tuple[str, dict]] = []
        self.in_details = 0
        self.details_text: list[str] = []
        self.open_classes: list[list[str]] = []
        self.text_by_class: dict[str, str] = {}
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "a" and "href" in attributes:
            self.links.append((attributes["href"], attributes))
        if tag in ("script", "link") and ("src" in attributes or "href" in attributes):
            self.links.append((attributes.get("src") or attributes["href"], attributes))
        if tag == "details":
            self.in_details += 1
        if tag not in ("br", "img", "input", "meta", "link", "hr"):
            self.open_classes.append((attributes.get("class") or "").split())

    def handle_endtag(self, tag):
        if tag == "details":
            self.in_details -= 1
        if tag not in ("br", "img", "input", "meta", "link", "hr") and self.open_classes:
            self.open_classes.pop()

    def handle_data(self, data):
        if self.in_details:
            self.details_text.append(data)
        for classes in self.open_classes:
            for name in classes:
                self.text_by_class[name] = self.text_by_class.get(name, "") + data


def test_the_site_of_a_tiny_lab(lab: Lab) -> None:
    lab.add_lesson("p02.tiny", "02_Tiny.ipynb")
    lab.add_lesson("p02.later", "03_Later.ipynb", prerequisites=("p02.tiny",))
    out = lab.root / "built-site"

    done = lab.run_cli("site", "--out", str(out))

    assert done.returncode == 0, done.stdout + done.stderr
    assert "site: 2 lessons" in done.stdout
    page_path = out / PART / "02_Tiny.html"
    assert page_path.is_file()
    page = Page(page_path)

    solution = "".join(page.details_text)
    assert "Reference solution: add_one" in solution and "return x + 1" in solution  # folded, with its caption
    assert "raise NotImplementedError" not in solution  # the exercise cell is not folded: it is the lesson
    check = page.text_by_class["llm-check"]
    assert "checks add_one (3 checks)" in check
    for description in ("hand-checkable: add_one(2) == 3", "random integers in [-100, 100)"):
        assert description in check
    assert 'check("add_one")' not in page_path.read_text(encoding="utf-8")

    (badge,) = [href for href, attributes in page.links if attributes.get("class") == "colab-badge"]
    assert badge.startswith("https://colab.research.google.com/") and badge.endswith(f"/{PART}/02_Tiny.ipynb")

    index = json.loads((out / "search-index.json").read_text(encoding="utf-8"))
    assert [(e["id"], e["url"], e["title"], e["title_zh"]) for e in index] == [
        ("p02.tiny", f"{PART}/02_Tiny.html", "Tiny", "小练习"),
        ("p02.later", f"{PART}/03_Later.html", "Tiny", "小练习"),
    ]
    assert "Add one" in index[0]["headings"]
    assert (out / "search-index.js").read_text(encoding="utf-8").startswith("window.LLM_ALGO_SEARCH = [")

    pages = sorted(out.rglob("*.html"))
    assert {p.relative_to(out).as_posix() for p in pages} == {
        "index.html",
        f"{PART}/index.html",
        f"{PART}/02_Tiny.html",
        f"{PART}/03_Later.html",
    }
    broken = []
    for path in pages:
        for href, _ in Page(path).links:
            parts = urlsplit(href)
            if parts.scheme or not parts.path:
                continue  # another site, or an anchor on this page
            if not (path.parent / unquote(parts.path)).resolve().is_file():
                broken.append(f"{path.relative_to(out)} -> {href}")
    assert not broken, broken
    home = Page(out / "index.html")
    assert {href for href, _ in home.links} >= {f"{PART}/02_Tiny.html", f"{PART}/03_Later.html", f"{PART}/index.html"}
    assert ("../" + f"{PART}/03_Later.html", "next") in [(href, a.get("rel")) for href, a in page.links]
