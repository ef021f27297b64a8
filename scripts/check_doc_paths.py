#!/usr/bin/env python3
"""Checks that the docs name files that exist.

In README.md, every folder's README.md and docs/*.md: each `path` in backticks that starts with
one of the repository's top-level folders and ends in a file extension (`gateway/intake/intake.cc`), and
each relative Markdown link (`[api](docs/api.md)`), must lead to a file or folder of the checkout.
A path with an upper-case placeholder (`policies/tests/NAME.cases.yaml`) is an example, not
checked.

  python3 scripts/check_doc_paths.py [ROOT]     exit 1 and one line per path that leads nowhere
"""
import glob
import os
import re
import sys

CODE_PATH = re.compile(r"`([A-Za-z0-9_./-]+\.[a-z]{1,5})`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PLACEHOLDER = re.compile(r"(^|/)[A-Z][A-Z_]+(\.|/|$)")


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    top = {d for d in os.listdir(root)
           if os.path.isdir(os.path.join(root, d)) and not d.startswith((".", "build"))}
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames
                       if not d.startswith((".", "build")) and d != "node_modules"]
        if dirpath != root and "README.md" in filenames:
            docs.append(os.path.join(dirpath, "README.md"))
    errors, checked = [], 0
    for doc in docs:
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        rel_doc = os.path.relpath(doc, root)
        for m in CODE_PATH.finditer(text):
            path = m.group(1)
            if path.split("/")[0] not in top or PLACEHOLDER.search(path):
                continue
            checked += 1
            if not os.path.exists(os.path.join(root, path)):
                errors.append(f"{rel_doc}:{text.count(chr(10), 0, m.start()) + 1}: `{path}` does not exist")
        for m in LINK.finditer(text):
            target = m.group(1).split("#")[0]
            if not target or re.match(r"^[a-z]+:", target):
                continue  # an anchor in the same page, or a URL
            checked += 1
            if not os.path.exists(os.path.join(os.path.dirname(doc), target)):
                errors.append(f"{rel_doc}:{text.count(chr(10), 0, m.start()) + 1}: link {target} leads nowhere")
    for e in errors:
        print(e)
    print(f"check_doc_paths: {checked} paths and links in {len(docs)} documents, {len(errors)} broken")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
