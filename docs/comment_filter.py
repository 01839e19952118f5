#!/usr/bin/env python3
"""Doxygen INPUT_FILTER: reads the public headers' plain `//` comments as
documentation, so the headers stay in the project's comment style and the
reference is still generated from them. Prints the filtered file.

- the comment block that opens a file becomes its @file description;
- a `//` line comment before a declaration becomes that declaration's doc;
- `code;  // text` after a member becomes a trailing `///<` doc;
- `// ---- Title ----` section rules become plain comments (not docs).
"""
import re
import sys

RULE = re.compile(r"^\s*// -{2,}")
OWN_LINE = re.compile(r"^(\s*)//(?![/!])\s?(.*)$")
TRAILING = re.compile(r"^(\s*[^/\s].*?[;,{])(\s*)//(?![/!<])\s?(.*)$")


def filter_lines(lines):
    out = []
    in_header = True  # still inside the opening comment block
    for line in lines:
        stripped = line.strip()
        if RULE.match(line):
            out.append("/* " + stripped.lstrip("/ ").rstrip("- ") + " */\n")
            in_header = False
            continue
        m = OWN_LINE.match(line)
        if m:
            if in_header and not out:
                out.append("/// @file\n")
            out.append(f"{m.group(1)}/// {m.group(2)}\n")
            continue
        if in_header and out:
            # A blank line ends the file's description: what follows documents
            # a declaration, not the file.
            out.append("\n" if stripped == "" else line)
            in_header = False
            continue
        in_header = False
        m = TRAILING.match(line)
        if m and '"' not in m.group(1):
            out.append(f"{m.group(1)}{m.group(2)}///< {m.group(3)}\n")
            continue
        out.append(line)
    return out


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        sys.stdout.write("".join(filter_lines(f.readlines())))


if __name__ == "__main__":
    main()
