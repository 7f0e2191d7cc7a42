#!/usr/bin/env python3
"""Replaces (or appends) one marked section of bench/RESULTS.md.

    update_results.py RESULTS_MD NAME SECTION_FILE

The section is everything between `<!-- NAME:begin -->` and `<!-- NAME:end -->`;
SECTION_FILE holds the new text, markers included. Other sections are left alone, so
each benchmark script owns its own section.
"""
import re
import sys


def main() -> int:
    path, name, section_file = sys.argv[1:4]
    section = open(section_file).read().rstrip("\n")
    try:
        text = open(path).read()
    except FileNotFoundError:
        text = "# RackWeave benchmark results\n"
    pattern = re.compile(r"<!-- %s:begin -->.*?<!-- %s:end -->" % (name, name), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as out:
        out.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
