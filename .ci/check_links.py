#!/usr/bin/env python3
"""Checks the links between the project's markdown pages (standard library only).

  python3 .ci/check_links.py

For README.md, docs/*.md and bench/*.md: every relative link and image
(`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`) must name a file
or folder that exists, and an anchor must be a heading of the target page
(GitHub's rule: lower case, punctuation dropped, spaces to hyphens, -1, -2
... for repeats). Links inside code blocks and code spans are not links.
Every docs/*.md page must be reachable from README.md by following links
between the pages. Exit 0 when all hold, 1 with each failure named.
"""
import glob
import os
import re
import sys
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def pages():
    out = [os.path.join(ROOT, "README.md")]
    out += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    out += sorted(glob.glob(os.path.join(ROOT, "bench", "*.md")))
    return [p for p in out if os.path.exists(p)]


def strip_code(text):
    """The text with fenced code blocks and inline code spans blanked (line numbers kept)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            out.append("")
            continue
        if m:
            fence = m.group(1)
            out.append("")
            continue
        out.append(re.sub(r"(`+)(.+?)\1", lambda g: " " * len(g.group(0)), line))
    return "\n".join(out)


def slug(heading):
    h = re.sub(r"\s*\{#[^}]*\}\s*$", "", heading.strip())       # Doxygen's {#id}
    h = re.sub(r"`([^`]*)`", r"\1", h)
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)             # a link in a heading: its text
    h = h.lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        for line in strip_code(open(path, encoding="utf-8").read()).split("\n"):
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
            m2 = re.search(r"\{#([^}]*)\}", m.group(2))
            if m2:
                out.add(m2.group(1))
        cache[path] = out
    return cache[path]


def links(path):
    text = strip_code(open(path, encoding="utf-8").read())
    for n, line in enumerate(text.split("\n"), 1):
        for m in LINK.finditer(line):
            yield n, m.group(1)


def main():
    errors = []
    graph = {}
    for page in pages():
        rel = os.path.relpath(page, ROOT)
        graph[page] = set()
        for n, target in links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):   # http:, https:, mailto: ...
                continue
            path, _, frag = target.partition("#")
            path = urllib.parse.unquote(path)
            dest = page if not path else os.path.normpath(os.path.join(os.path.dirname(page), path))
            if not os.path.exists(dest):
                errors.append(f"{rel}:{n}: {target}: no such file")
                continue
            if frag:
                if not dest.endswith(".md") or os.path.isdir(dest):
                    errors.append(f"{rel}:{n}: {target}: an anchor into a file that is not a markdown page")
                elif urllib.parse.unquote(frag) not in anchors(dest):
                    errors.append(f"{rel}:{n}: {target}: no heading #{frag} in {os.path.relpath(dest, ROOT)}")
            if dest.endswith(".md") and os.path.isfile(dest):
                graph[page].add(dest)
    start = os.path.join(ROOT, "README.md")
    seen, todo = {start}, [start]
    while todo:
        p = todo.pop()
        for q in graph.get(p, ()):
            if q not in seen:
                seen.add(q)
                todo.append(q)
                if q not in graph and q.endswith(".md"):
                    graph[q] = set()
                    for n, target in links(q):
                        path = target.partition("#")[0]
                        if path and not re.match(r"^[a-z][a-z0-9+.-]*:", path, re.I):
                            d = os.path.normpath(os.path.join(os.path.dirname(q), urllib.parse.unquote(path)))
                            if d.endswith(".md") and os.path.isfile(d):
                                graph[q].add(d)
    for page in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        if page not in seen:
            errors.append(f"{os.path.relpath(page, ROOT)}: not reachable from README.md by links")
    if errors:
        print("check_links: FAILED\n  " + "\n  ".join(errors), file=sys.stderr)
        return 1
    print(f"check_links: {len(graph)} pages, every relative link resolves, every docs/ page "
          "is reachable from README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
