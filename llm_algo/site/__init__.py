"""The course website: static HTML pages built from the committed notebooks by `python -m llm_algo site`.

`build` writes the site; `lesson_page` turns one notebook into a page body; `layout` draws the pages around it
(home, part indexes, navigation); `search` writes the client-side search (a JSON index and a small script); `style`
the style sheet. Nothing is fetched from the network, at build time or in the browser.
"""
