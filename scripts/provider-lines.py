#!/usr/bin/env python3
"""Counts the production Rust lines of each crate under providers/ (issue 36's "before/after").

Production: every .rs file under providers/<crate>/src, less what only `cargo test` compiles:
a module declared `#[cfg(test)] mod name;` (its file name.rs or name/mod.rs, and everything
under name/), and an inline `#[cfg(test)] mod name { ... }` up to its closing brace at the
same indentation (the tree is rustfmt-formatted, so that brace is the line `}` at the indent
of `mod`). providers/<crate>/tests, benches and examples are outside src and not counted.
Prints, per crate and in total: lines (as wc -l counts them) and code lines (not blank, not
only a comment: `//`, `///`, `//!`).

Usage: scripts/provider-lines.py [TREE] [--copy DEST]   (TREE: the current directory)
  --copy DEST  also writes the production code to DEST/<crate>/src/..., every other line
               blank (so line numbers stay the tree's), for `duplicates --repo DEST`
"""

import os
import re
import sys

CFG_TEST = re.compile(r"^\s*#\[cfg\(test\)\]\s*$")
MOD_DECL = re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*(;|\{)")


def module_dir(path):
    """Where the submodules a file declares live."""
    base = os.path.basename(path)
    if base in ("lib.rs", "main.rs", "mod.rs"):
        return os.path.dirname(path)
    return path[: -len(".rs")]


def production_lines(path, excluded):
    """The file's (index, line) outside #[cfg(test)] modules; adds declared test files to
    `excluded`."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    kept, i = [], 0
    while i < len(lines):
        line = lines[i]
        if CFG_TEST.match(line):
            j = i + 1
            while j < len(lines) and lines[j].strip().startswith("#["):
                j += 1  # further attributes on the same item
            m = MOD_DECL.match(lines[j]) if j < len(lines) else None
            if m and m.group(3) == ";":
                where = module_dir(path)
                excluded.add(os.path.join(where, m.group(2) + ".rs"))
                excluded.add(os.path.join(where, m.group(2)))
                i = j + 1
                continue
            if m:
                close = m.group(1) + "}"
                k = j + 1
                while k < len(lines) and lines[k].rstrip() != close:
                    k += 1
                i = k + 1
                continue
        kept.append((i, line))
        i += 1
    return kept, len(lines)


def is_code(line):
    s = line.strip()
    return bool(s) and not s.startswith("//")


def count(tree, copy=None):
    providers = os.path.join(tree, "providers")
    result = {}
    for crate in sorted(os.listdir(providers)):
        src = os.path.join(providers, crate, "src")
        if not os.path.isdir(src):
            continue
        files = sorted(
            os.path.join(d, name)
            for d, _, names in os.walk(src)
            for name in names
            if name.endswith(".rs")
        )
        excluded, kept = set(), {}
        # Parents before children, so a declared test module is known before its file is read.
        for path in sorted(files, key=lambda p: (p.count(os.sep), p)):
            if any(path == e or path.startswith(e + os.sep) for e in excluded):
                continue
            kept[path] = production_lines(path, excluded)
        kept = {
            p: ls
            for p, ls in kept.items()
            if not any(p == e or p.startswith(e + os.sep) for e in excluded)
        }
        if copy:
            for path, (lines, total) in kept.items():
                out = [""] * total
                for index, line in lines:
                    out[index] = line
                dest = os.path.join(copy, os.path.relpath(path, providers))
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with open(dest, "w", encoding="utf-8") as f:
                    f.write("\n".join(out) + "\n")
        kept = {path: lines for path, (lines, _) in kept.items()}
        result[crate] = (
            len(kept),
            sum(len(ls) for ls in kept.values()),
            sum(sum(1 for _, l in ls if is_code(l)) for ls in kept.values()),
        )
    return result


def main(argv):
    copy = None
    if "--copy" in argv:
        at = argv.index("--copy")
        if at + 1 >= len(argv):
            sys.exit("--copy takes a folder")
        copy = argv[at + 1]
        argv = argv[:at] + argv[at + 2 :]
    tree = argv[0] if argv else "."
    result = count(tree, copy)
    print("| crate | files | lines | code lines |")
    print("|---|---:|---:|---:|")
    for crate, (files, lines, code) in result.items():
        print(f"| {crate} | {files} | {lines} | {code} |")
    totals = [sum(v[i] for v in result.values()) for i in range(3)]
    print(f"| **total** | {totals[0]} | {totals[1]} | {totals[2]} |")


if __name__ == "__main__":
    main(sys.argv[1:])
