#!/usr/bin/env python3
"""The import graph of one crate's modules, and its circles.

    scripts/dev/imports.py crates/strata-server           circles (strongly connected modules)
    scripts/dev/imports.py crates/strata-server --dot     the whole graph, for `dot -Tsvg`

A module is a file (`src/ops/watch.rs` is `ops::watch`, `src/ops/mod.rs` is
`ops`). An edge A -> B is any `crate::B...` path written in A's file, in a
`use` or inline, test modules included (`#[cfg(test)]` code is read as well:
a test that reaches upward is a dependency too). A path naming an item that
a `mod.rs` re-exports (`crate::ops::Foo`) is an edge to that `mod.rs`.

Circles are printed one per line, largest first; the exit status is the
number of circles (0 when the graph points one way), so CI or a reviewer can
hold the line: `scripts/test` fails on a circle in strata-server.
"""
import os
import re
import sys


def modules(src):
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            mods["::".join(rel)] = path
    return mods


PATH = re.compile(r"crate::((?:[a-z_][a-z0-9_]*::)*[A-Za-z_][A-Za-z0-9_]*)")
USE_GROUP = re.compile(r"use\s+crate::([a-z0-9_:]*?)::?\{([^;]*)\};", re.S)


SUPER_GROUP = re.compile(r"\b((?:super::)+)\{")
SUPER = re.compile(r"\b((?:super::)+)((?:[a-z_][a-z0-9_]*::)*[A-Za-z_][A-Za-z0-9_]*)")


def targets(text, mods, me, is_mod_rs):
    """Every module of `mods` that `text` names through `crate::` or `super::`."""
    found = set()
    # `super::` from a file module `a::b` is `a`; from `a/mod.rs` it is a's parent.
    here = me.split("::") if me else []
    if not is_mod_rs:
        here = here[:-1]
    # `use super::{a, b::C}`: the group under the resolved parent, for
    # USE_GROUP below to split.
    text = SUPER_GROUP.sub(
        lambda m: "crate::" + "::".join(here[: len(here) - m.group(1).count("super::") + 1]).strip(":") + "::{",
        text,
    )
    text = SUPER.sub(
        lambda m: "crate::" + "::".join(here[: len(here) - m.group(1).count("super::") + 1]
                                        + [m.group(2)]).lstrip(":"),
        text,
    )
    names = [m.group(1) for m in PATH.finditer(text)]
    # `use crate::ops::{watch, dump::pump}`: each inner path under the prefix.
    for m in USE_GROUP.finditer(text):
        prefix = m.group(1).strip(":")
        for inner in re.split(r"[,\s]+", re.sub(r"\{[^}]*\}", "", m.group(2))):
            inner = inner.strip()
            if inner and inner != "self":
                names.append(f"{prefix}::{inner}" if prefix else inner)
    for name in names:
        parts = name.split("::")
        # the longest prefix that is a module
        for i in range(len(parts), 0, -1):
            cand = "::".join(parts[:i])
            if cand in mods:
                found.add(cand)
                break
    return found


def graph(src):
    mods = modules(src)
    edges = {m: set() for m in mods}
    for m, path in mods.items():
        with open(path) as fh:
            text = fh.read()
        for t in targets(text, mods, m, path.endswith(("mod.rs", "lib.rs"))):
            # a module naming its own children or itself is not an import
            if t != m and not t.startswith(m + "::") and m != "":
                edges[m].add(t)
    return edges


def circles(edges):
    """Tarjan's strongly connected components, larger than one module."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out, key=len, reverse=True)


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        sys.exit(2)
    edges = graph(os.path.join(sys.argv[1], "src"))
    if "--dot" in sys.argv:
        print("digraph imports {")
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f'  "{a}" -> "{b}";')
        print("}")
        return
    found = circles(edges)
    for comp in found:
        print(f"{len(comp)}: " + " ".join(comp))
    if not found:
        print("no circles")
    sys.exit(len(found))


if __name__ == "__main__":
    main()
