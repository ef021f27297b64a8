#!/usr/bin/env python3
"""Checks that sources stay readable at once: no function over 80 lines, no file over 600.

Counts C++ sources (.h, .cc) outside tests/, fuzz/ and build folders; CUDA kernels (.cu, .cuh)
and generated code are not counted. A function is counted from the line its body opens on to
its closing brace; the member functions of a class defined in a file count one by one. Brace
counting ignores comments, strings and character literals; it is a reader's measure, not a
parser's, which is what the limit is about.

  python3 scripts/check_sizes.py [ROOT]   exit 1 and one line per function or file over
"""
import os
import re
import sys

MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 600
SKIPPED_TOP = {"tests", "fuzz", "examples"}
SKIPPED_DIRS = {"node_modules", ".git"}
SCOPE_KEYWORD = re.compile(r"\bnamespace\b|\bextern\s*$")
CLASS_KEYWORD = re.compile(r"\b(class|struct|union|enum)\b")
# A signature's end: `) {`, `) const {`, `) override {`, `) -> T {`, a constructor's init list.
SIGNATURE_END = re.compile(r"\)\s*(const|override|final|noexcept|mutable|->[^()]*|\s)*$|\)\s*$")


def strip(line, in_comment):
    """The line without comments, strings and char literals; and whether a /* */ is still open."""
    out = []
    i = 0
    while i < len(line):
        if in_comment:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), True
            i, in_comment = end + 2, False
        elif line.startswith("//", i):
            break
        elif line.startswith("/*", i):
            in_comment, i = True, i + 2
        elif line[i] in "\"'":
            quote, i = line[i], i + 1
            while i < len(line) and line[i] != quote:
                i += 2 if line[i] == "\\" else 1
            i += 1
        else:
            out.append(line[i])
            i += 1
    return "".join(out), in_comment


def long_functions(path):
    """(lines, first line, text) of every function body over the limit in `path`."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    found, stack, head, in_comment = [], [], "", False
    for number, raw in enumerate(lines, 1):
        code, in_comment = strip(raw, in_comment)
        if code.lstrip().startswith("#"):
            continue  # preprocessor lines hold no braces that matter
        for ch in code:
            if ch == "{":
                # What this brace opens: a scope that holds functions (namespace, class), a
                # function body (at a scope that holds functions), or a block inside one.
                in_function = any(kind in ("function", "data") for kind, _ in stack)
                text = head.strip()
                if in_function:
                    kind = "block"
                elif SCOPE_KEYWORD.search(text) or (CLASS_KEYWORD.search(text) and
                                                    not SIGNATURE_END.search(text)):
                    kind = "scope"
                elif text.endswith("="):
                    kind = "data"  # a table or an initializer, not code
                else:
                    kind = "function"
                stack.append((kind, number))
                head = ""
            elif ch == "}":
                if stack:
                    kind, start = stack.pop()
                    if kind == "function" and number - start + 1 > MAX_FUNCTION_LINES:
                        found.append((number - start + 1, start, lines[start - 1].strip()))
                head = ""
            elif ch == ";":
                head = ""
            else:
                head += ch
        head += " "
    return found, len(lines) - (1 if lines and lines[-1] == "" else 0)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    errors, checked = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
        dirnames[:] = [d for d in dirnames if d not in SKIPPED_DIRS and not d.startswith("build")
                       and not (rel == "." and d in SKIPPED_TOP)]
        for name in sorted(filenames):
            if not name.endswith((".h", ".cc")):
                continue
            path = os.path.join(dirpath, name)
            shown = os.path.relpath(path, root)
            checked += 1
            functions, total = long_functions(path)
            if total > MAX_FILE_LINES:
                errors.append(f"{shown}: {total} lines (at most {MAX_FILE_LINES})")
            for count, start, text in functions:
                errors.append(f"{shown}:{start}: function of {count} lines (at most "
                              f"{MAX_FUNCTION_LINES}): {text[:60]}")
    for e in errors:
        print(e)
    print(f"check_sizes: {checked} files, {len(errors)} over the limits")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
