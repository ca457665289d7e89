"""The site's one style sheet: a readable column, the check and solution boxes, and Pygments' code colours."""

from __future__ import annotations

BASE_CSS = """
body { font: 16px/1.55 system-ui, -apple-system, "Segoe UI", "PingFang SC", "Microsoft YaHei", sans-serif;
  max-width: 60rem; margin: 0 auto; padding: 0 1rem 4rem; color: #1f2328; }
header { position: sticky; top: 0; background: #fff; padding: .6rem 0; border-bottom: 1px solid #d0d7de; z-index: 1; }
header .crumbs { display: inline-block; margin-right: 1rem; }
#search { width: 18rem; max-width: 100%; padding: .3rem .5rem; }
#search-results { margin: .3rem 0 0; padding-left: 1.4rem; }
a { color: #0969da; }
code, pre { font: 14px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.highlight pre { background: #f6f8fa; padding: .7rem; overflow-x: auto; border-radius: 6px; }
.lesson-bar { margin: 1rem 0; display: flex; flex-wrap: wrap; gap: .4rem 1rem; align-items: center; }
.colab-badge { background: #f9ab00; color: #000; padding: .15rem .6rem; border-radius: 4px; text-decoration: none;
  font-weight: 600; }
.facts, .zh { color: #57606a; font-size: .9em; }
.llm-check { border-left: 4px solid #1a7f37; background: #f0fff4; padding: .2rem .9rem; margin: .8rem 0; }
.llm-solution { border: 1px solid #d0d7de; border-radius: 6px; padding: .3rem .8rem; margin: .8rem 0; }
.llm-solution summary { cursor: pointer; font-weight: 600; }
.anchor-link { visibility: hidden; margin-left: .3rem; text-decoration: none; }
h1:hover .anchor-link, h2:hover .anchor-link, h3:hover .anchor-link { visibility: visible; }
table { border-collapse: collapse; } td, th { border: 1px solid #d0d7de; padding: .2rem .5rem; }
ol.lessons li { margin: .15rem 0; }
"""


def style_sheet() -> str:
    from pygments.formatters import HtmlFormatter

    return BASE_CSS + HtmlFormatter().get_style_defs(".highlight")
