"""The site's search, all in the browser: an index of every lesson (id, titles, headings) written as JSON and as a
script that sets it (a page opened from disk may not fetch a file), and a small vanilla-JS search box."""

from __future__ import annotations

import json
import re

from .layout import LessonEntry

HEADING = re.compile(r"^#{1,4}\s+(.+?)\s*$", re.MULTILINE)


def index_entry(entry: LessonEntry) -> dict:
    headings = [
        match.group(1).replace("`", "")
        for cell in entry.lesson.cells
        if cell.cell_type == "markdown"
        for match in HEADING.finditer(cell.source)
    ]
    return {
        "id": entry.lesson.id,
        "title": entry.title,
        "title_zh": entry.title_zh,
        "part": entry.lesson.part,
        "url": entry.href,
        "headings": headings[1:],  # the first is the title
    }


def index_json(entries: list[LessonEntry]) -> str:
    return json.dumps([index_entry(e) for e in entries], ensure_ascii=False, indent=1)


def index_script(index: str) -> str:
    return f"window.LLM_ALGO_SEARCH = {index};\n"


SEARCH_JS = """// Search the lessons: every word typed must appear in a lesson's id, titles or headings.
(function () {
  var box = document.getElementById("search"), list = document.getElementById("search-results");
  var root = document.body.dataset.root || "", lessons = window.LLM_ALGO_SEARCH || [];
  function text(lesson) {
    return [lesson.id, lesson.title, lesson.title_zh, lesson.part].concat(lesson.headings).join(" \\n ").toLowerCase();
  }
  box.addEventListener("input", function () {
    var words = box.value.toLowerCase().split(/\\s+/).filter(Boolean);
    list.innerHTML = "";
    if (!words.length) return;
    lessons.filter(function (lesson) {
      var all = text(lesson);
      return words.every(function (word) { return all.indexOf(word) >= 0; });
    }).slice(0, 20).forEach(function (lesson) {
      var item = document.createElement("li"), link = document.createElement("a");
      var heading = lesson.headings.find(function (h) {
        return words.some(function (word) { return h.toLowerCase().indexOf(word) >= 0; });
      });
      link.href = root + lesson.url;
      link.textContent = lesson.title + " · " + lesson.id + (heading ? " — " + heading : "");
      item.appendChild(link);
      list.appendChild(item);
    });
  });
})();
"""
