#!/usr/bin/env python3
"""Checks RackWeave's documentation against the repository it describes.

    python3 tests/docs/check_docs.py REPO_ROOT

1. Every relative Markdown link in README.md, CHANGELOG.md and docs/*.md resolves to a
   file or directory of the repository, and a `#anchor` on it names a heading of that
   file (GitHub's anchors: lower case, spaces to '-', punctuation other than '-' and
   '_' dropped, a repeated heading gets -1, -2, ...).
2. README.md has at most 200 lines.
3. Every row of docs/bad-input.md's table names tests that exist: its last column lists
   test cases in backticks with their file in parentheses (`name` (path); several
   separated by ';', or by ',' / 'and' before one path). A C++ file must hold the name
   as a TEST_CASE string, a Python file as a `def test_...` function; a shell script
   must be the command of a ctest test of that name; `section `name`` must be a SECTION
   of the file; `fuzz_*` must be a libFuzzer target of tests/fuzz.

Prints each problem and exits 1, or exits 0 when everything holds. Python 3 standard
library only.
"""

import os
import re
import sys
import unicodedata
import urllib.parse

README_MAX_LINES = 200


# --------------------------------------------------------------------------- Markdown

def strip_code(text):
    """The text with fenced code blocks blanked (line numbers kept) and inline code
    spans removed, so that links and headings inside code are not seen."""
    out = []
    fence = None
    for line in text.split("\n"):
        m = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            out.append("")
            continue
        if m:
            fence = m.group(1)
            out.append("")
            continue
        out.append(line)
    return "\n".join(out)


def remove_code_spans(line):
    return re.sub(r"(`+)(.+?)\1", "", line)


def github_anchor(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    kept = []
    for c in text:
        cat = unicodedata.category(c)
        if c in " -_" or cat[0] in "LMN" or cat == "Pc":
            kept.append(c)
    return "".join(kept).replace(" ", "-")


def anchors_of(path, cache={}):
    """Every anchor a Markdown file defines: its headings' (with GitHub's -N suffixes for
    repeats) and explicit <a name=...> / id=... ones."""
    if path in cache:
        return cache[path]
    with open(path, encoding="utf-8") as f:
        text = strip_code(f.read())
    seen = {}
    anchors = set()
    lines = text.split("\n")
    for i, line in enumerate(lines):
        heading = None
        m = re.match(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            heading = m.group(2)
        elif (i + 1 < len(lines) and line.strip() and not line.startswith(("|", "-", "*", ">"))
              and re.match(r"^ {0,3}(=+|-+)\s*$", lines[i + 1])
              and not re.match(r"^ {0,3}(=+|-+)\s*$", line)):
            heading = line.strip()  # a setext heading
        if heading is not None:
            # Inline code keeps its text in the anchor (only its backticks go).
            base = github_anchor(heading.replace("`", ""))
            n = seen.get(base, 0)
            anchors.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
        for m in re.finditer(r"""<a\s+(?:name|id)=["']([^"']+)["']""", line):
            anchors.add(m.group(1))
    cache[path] = anchors
    return anchors


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+[\"'(][^)]*)?\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")


def links_of(path):
    """(line number, target) for every inline or reference-style link outside code."""
    with open(path, encoding="utf-8") as f:
        text = strip_code(f.read())
    for number, line in enumerate(text.split("\n"), 1):
        line = remove_code_spans(line)
        for m in LINK.finditer(line):
            yield number, m.group(1).strip("<>")
        m = REFERENCE.match(line)
        if m:
            yield number, m.group(1).strip("<>")


def check_links(root, files, problems):
    root_real = os.path.realpath(root)
    for path in files:
        rel = os.path.relpath(path, root)
        for number, target in links_of(path):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
                continue  # http:, https:, mailto:, ...: not checked here
            where, _, anchor = target.partition("#")
            where = urllib.parse.unquote(where)
            if where:
                dest = os.path.normpath(os.path.join(os.path.dirname(path), where))
                if not os.path.realpath(dest).startswith(root_real + os.sep) and \
                        os.path.realpath(dest) != root_real:
                    problems.append(f"{rel}:{number}: link '{target}' leads out of the repository")
                    continue
                if not os.path.exists(dest):
                    problems.append(f"{rel}:{number}: link '{target}': no file or directory "
                                    f"{os.path.relpath(dest, root)}")
                    continue
            else:
                dest = path
            if anchor:
                anchor = urllib.parse.unquote(anchor)
                if os.path.isdir(dest) or not dest.endswith((".md", ".markdown")):
                    problems.append(f"{rel}:{number}: link '{target}': an anchor on "
                                    f"{os.path.relpath(dest, root)}, which is not a Markdown file")
                elif anchor not in anchors_of(dest):
                    problems.append(f"{rel}:{number}: link '{target}': "
                                    f"{os.path.relpath(dest, root)} has no heading with the "
                                    f"anchor '#{anchor}'")


# --------------------------------------------------------------------------- the tests

def cpp_string_literals(text, start):
    """The concatenated string literals from text[start:] up to the first ',' or ')'
    outside them (adjacent literals join, as in C++)."""
    value = []
    i = start
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            i = text.find("\n", i) if text.find("\n", i) >= 0 else len(text)
        elif text.startswith("/*", i):
            i = text.find("*/", i) + 2 if text.find("*/", i) >= 0 else len(text)
        elif c == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                if text[i] == "\\" and i + 1 < len(text):
                    nxt = text[i + 1]
                    value.append({"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}.get(nxt, nxt))
                    i += 2
                else:
                    value.append(text[i])
                    i += 1
            i += 1
        else:
            break
    return "".join(value)


def cpp_names(path, macro_pattern, cache={}):
    key = (path, macro_pattern)
    if key not in cache:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        names = set()
        for m in re.finditer(macro_pattern, text):
            names.add(cpp_string_literals(text, m.end()))
        cache[key] = names
    return cache[key]


def test_cases(path):
    return cpp_names(path, r"\b(?:TEST_CASE|SCENARIO)\s*\(") | \
        cpp_names(path, r"\bTEST_CASE_METHOD\s*\(\s*[\w:<>]+\s*,")


def sections(path):
    return cpp_names(path, r"\b(?:SECTION|GIVEN|WHEN|THEN)\s*\(")


def python_tests(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return set(re.findall(r"^\s*(?:async\s+)?def\s+(test_\w+)\s*\(", f.read(), re.M))


def cmake_tests(root, cache={}):
    """{ctest name: its add_test command text} from every CMake file under tests/."""
    if root not in cache:
        tests = {}
        for base, _, names in os.walk(os.path.join(root, "tests")):
            for name in names:
                if name == "CMakeLists.txt" or name.endswith(".cmake"):
                    with open(os.path.join(base, name), encoding="utf-8", errors="replace") as f:
                        text = f.read()
                    for m in re.finditer(r"add_test\s*\(\s*NAME\s+([\w.-]+)(.*?)\)", text, re.S):
                        tests[m.group(1)] = m.group(2)
        cache[root] = tests
    return cache[root]


def fuzz_targets(root, cache={}):
    if root not in cache:
        targets = set()
        fuzz = os.path.join(root, "tests", "fuzz")
        cmake = os.path.join(fuzz, "CMakeLists.txt")
        if os.path.exists(cmake):
            with open(cmake, encoding="utf-8") as f:
                text = f.read()
            targets |= set(re.findall(r"rw_fuzz_target\(\s*(fuzz_\w+)", text))
            # Targets made in a loop (fuzz_${name}, one per control message): the
            # loop's items, each NAME or NAME=TYPE.
            for m in re.finditer(r"foreach\s*\(\s*\w+\s+([^)]*)\)", text):
                if "rw_fuzz_target(fuzz_${" in text[m.end():m.end() + 400]:
                    targets |= {"fuzz_" + n.split("=")[0] for n in m.group(1).split()}
        cache[root] = targets
    return cache[root]


def split_outside_backticks(text, sep):
    parts, cur, inside = [], [], False
    for c in text:
        if c == "`":
            inside = not inside
        if c == sep and not inside:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


PATH = re.compile(r"\b(?:tests|apps|bench|config|actors|runtime|transports)/[\w./-]*[\w/]")


def parse_test_cell(cell):
    """[(names, sections, paths)] per ';'-separated group of a Test cell. A group with
    names and no path takes the next group's paths (`a`; `b` (file)), else the
    previous one's."""
    groups = []
    for part in split_outside_backticks(cell, ";"):
        names, secs = [], []
        for m in re.finditer(r"(section\s+)?`([^`]+)`", part):
            (secs if m.group(1) else names).append(m.group(2))
        outside = re.sub(r"`[^`]*`", "", part)
        paths = []
        for paren in re.findall(r"\(([^()]*)\)", outside):
            paths += PATH.findall(paren)
        groups.append([names, secs, paths])
    for i, g in enumerate(groups):
        if (g[0] or g[1]) and not g[2] and not all(n.startswith("fuzz_") for n in g[0]):
            after = [h[2] for h in groups[i + 1:] if h[2]]
            before = [h[2] for h in groups[:i] if h[2]]
            g[2] = after[0] if after else (before[-1] if before else [])
    return groups


def table_rows(path):
    """(line number, cells) of the first table whose last header cell is 'Test'."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    rows, header = [], None
    for number, line in enumerate(lines, 1):
        if not line.startswith("|"):
            if header is not None and rows:
                break
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if header is None:
            if cells and cells[-1].lower() == "test":
                header = cells
            continue
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue
        rows.append((number, cells, len(header)))
    return header, rows


def check_bad_input(root, problems):
    doc = os.path.join(root, "docs", "bad-input.md")
    if not os.path.exists(doc):
        problems.append("docs/bad-input.md is missing")
        return
    header, rows = table_rows(doc)
    if header is None or not rows:
        problems.append("docs/bad-input.md: no table whose last column is 'Test'")
        return
    for number, cells, width in rows:
        where = f"docs/bad-input.md:{number}"
        if len(cells) != width:
            problems.append(f"{where}: {len(cells)} cells, the header has {width}")
            continue
        groups = parse_test_cell(cells[-1])
        if not any(g[0] for g in groups):
            problems.append(f"{where}: the Test column names no test")
        for names, secs, paths in groups:
            for p in paths:
                if not os.path.exists(os.path.join(root, p)):
                    problems.append(f"{where}: {p} does not exist")
            files = [p for p in paths if os.path.isfile(os.path.join(root, p))]
            for name in names:
                if name.startswith("fuzz_"):
                    if name not in fuzz_targets(root):
                        problems.append(f"{where}: `{name}` is not a fuzz target of tests/fuzz")
                    continue
                if not paths:
                    problems.append(f"{where}: `{name}` has no file in parentheses")
                    continue
                found = False
                for p in files:
                    full = os.path.join(root, p)
                    if p.endswith((".cpp", ".cc", ".hpp")) and name in test_cases(full):
                        found = True
                    elif p.endswith(".py") and name in python_tests(full):
                        found = True
                    elif p.endswith(".sh"):
                        command = cmake_tests(root).get(name)
                        if command is not None and os.path.basename(p) in command:
                            found = True
                if not found:
                    problems.append(f"{where}: test `{name}` is not in {', '.join(paths)} "
                                    "(no TEST_CASE, def test_ or ctest test of that name)")
            for sec in secs:
                if not any(p.endswith(".cpp") and sec in sections(os.path.join(root, p))
                           for p in files):
                    problems.append(f"{where}: section `{sec}` is not a SECTION of "
                                    f"{', '.join(paths)}")


# --------------------------------------------------------------------------- main

def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    root = argv[1]
    if not os.path.isdir(root):
        print(f"check_docs: {root} is not a directory", file=sys.stderr)
        return 2
    problems = []
    files = [os.path.join(root, n) for n in ("README.md", "CHANGELOG.md")]
    missing = [f for f in files if not os.path.exists(f)]
    for f in missing:
        problems.append(f"{os.path.relpath(f, root)} is missing")
    files = [f for f in files if f not in missing]
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        files += sorted(os.path.join(docs, n) for n in os.listdir(docs) if n.endswith(".md"))
    else:
        problems.append("docs/ is missing")
    check_links(root, files, problems)
    readme = os.path.join(root, "README.md")
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as f:
            count = len(f.read().splitlines())
        if count > README_MAX_LINES:
            problems.append(f"README.md has {count} lines; at most {README_MAX_LINES}")
    check_bad_input(root, problems)
    for p in problems:
        print(p)
    if problems:
        print(f"check_docs: {len(problems)} problem(s)")
        return 1
    print(f"check_docs: ok ({len(files)} Markdown files, README.md {count} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
