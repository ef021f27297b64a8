#!/usr/bin/env python3
"""Checks that every #include goes the way the folders' READMEs allow.

Each source folder's README.md has one line `May include: `a/`, `b/`.` (or `May include: any
folder.`) naming the folders its .h/.cc/.cu/.cuh files may include besides their own; a folder
without such a line falls under its parent's. Headers generated from proto/ (tandem/v1/...,
grpc/health/..., google/rpc/...) count as proto/. Includes that are not the project's (Abseil,
gRPC, the standard library) are not checked.

  python3 scripts/check_layers.py [ROOT]     exit 1 and one line per include that goes the wrong way
"""
import os
import re
import sys

SOURCE_EXTENSIONS = (".h", ".cc", ".cu", ".cuh")
GENERATED_PROTO_PREFIXES = ("tandem/v1/", "grpc/health/", "google/rpc/")
SKIPPED_DIRS = {"node_modules", ".git"}
RULE = re.compile(r"^May include:\s*(.*)$", re.MULTILINE)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def read_rules(root):
    """{folder: set of folders, or None for any} from every README.md with a May include line."""
    rules = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIPPED_DIRS and not d.startswith("build")]
        if "README.md" not in filenames:
            continue
        with open(os.path.join(dirpath, "README.md"), encoding="utf-8") as f:
            m = RULE.search(f.read())
        if not m:
            continue
        folder = os.path.relpath(dirpath, root).replace(os.sep, "/") + "/"
        if "any folder" in m.group(1):
            rules[folder] = None
        else:
            rules[folder] = {name.rstrip("/") + "/" for name in re.findall(r"`([^`]+)`", m.group(1))}
    return rules


def folder_of(path, rules):
    """The deepest folder with a rule that holds `path` (relative to the root), or None."""
    best = None
    for folder in rules:
        if path.startswith(folder) and (best is None or len(folder) > len(best)):
            best = folder
    return best


def allowed(source_folder, target_folder, rules):
    """Its own folder, or one its rule names; a subfolder with a README of its own is its own."""
    if target_folder is None or target_folder == source_folder:
        return True
    return rules[source_folder] is None or target_folder in rules[source_folder]


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    rules = read_rules(root)
    if not rules:
        print(f"check_layers: no README.md with a 'May include:' line under {root}")
        return 1
    top_level = {p.split("/")[0] for p in rules}
    errors = []
    checked = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIPPED_DIRS and not d.startswith("build")]
        for name in filenames:
            if not name.endswith(SOURCE_EXTENSIONS):
                continue
            path = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
            source = folder_of(path, rules)
            if source is None:
                continue
            with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                text = f.read()
            for m in INCLUDE.finditer(text):
                target_path = m.group(1)
                if target_path.startswith(GENERATED_PROTO_PREFIXES):
                    target_path = "proto/" + target_path
                if target_path.split("/")[0] not in top_level:
                    continue  # not the project's, or relative to the file's own folder
                target = folder_of(target_path, rules)
                checked += 1
                if not allowed(source, target, rules):
                    line = text.count("\n", 0, m.start()) + 1
                    errors.append(f"{path}:{line}: includes {m.group(1)} ({target}), but "
                                  f"{source}README.md allows only "
                                  f"{', '.join(sorted(rules[source])) or 'its own folder'}")
    for e in errors:
        print(e)
    print(f"check_layers: {checked} project includes in {len(rules)} folders, "
          f"{len(errors)} going the wrong way")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
