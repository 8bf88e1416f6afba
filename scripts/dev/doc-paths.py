#!/usr/bin/env python3
"""Check that every path a document names resolves to a file or folder.

    scripts/dev/doc-paths.py          README.md, scripts/README.md, docs/**/*.md

Two kinds of path are checked:

- a link, `[text](path)`, that is not a URL or an anchor: relative to the
  document, as a reader's browser takes it;
- a path written in the text that starts with one of the repository's top
  folders (`crates/`, `docs/`, `scripts/`, `packaging/`, `fuzz/`, `.ci/`):
  relative to the repository's root. A `:LINE` after it is dropped, and so
  is a trailing `.`, `,`, `:` or `)`; a crate's path without its
  `crates/` (`strata-store/src/seg/read.rs`) is taken under `crates/`. A
  path with a placeholder in it (a
  segment in capitals such as `TARGET`, or `{...}`, `<...>`, `*`) is a
  pattern, not a file, and is skipped when it does not resolve.

Prints each path that does not resolve, with its document and line; the
exit status is 1 if there is one (scripts/test runs this).
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPS = ("crates", "docs", "scripts", "packaging", "fuzz", ".ci")
LINK = re.compile(r"\]\(([^)\s]+)\)")
IN_TEXT = re.compile(r"(?<![\w./-])((?:%s)/[\w./@{}<>*+-]*)" % "|".join(re.escape(t) for t in TOPS))
IN_CRATE = re.compile(r"(?<![\w./-])(strata(?:-proto|-store|-server|-bench)?/(?:src|tests|examples|benches)/[\w./@{}<>*+-]*)")
PLACEHOLDER = re.compile(r"(^|/)[A-Z][A-Z0-9_]*(/|$|\.)|[{}<>*]")


def documents():
    yield ROOT / "README.md"
    yield ROOT / "scripts/README.md"
    yield from sorted((ROOT / "docs").rglob("*.md"))


def missing(doc):
    """(line number, path) for each path in `doc` that does not resolve."""
    text = doc.read_text()
    for number, line in enumerate(text.splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            if path and not (doc.parent / path).exists():
                yield number, target
        found = IN_TEXT.findall(line) + ["crates/" + p for p in IN_CRATE.findall(line)]
        for path in found:
            path = re.sub(r":\d.*$", "", path).rstrip(".,:;)")
            if (ROOT / path).exists() or PLACEHOLDER.search(path):
                continue
            yield number, path


def main():
    bad = 0
    for doc in documents():
        if not doc.exists():
            print(f"{doc.relative_to(ROOT)}: missing")
            bad += 1
            continue
        for number, path in missing(doc):
            print(f"{doc.relative_to(ROOT)}:{number}: {path}")
            bad += 1
    if bad:
        print(f"doc-paths: {bad} paths do not resolve", file=sys.stderr)
        sys.exit(1)
    print("doc-paths: every path resolves")


if __name__ == "__main__":
    main()
