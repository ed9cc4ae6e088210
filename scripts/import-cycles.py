#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Import circles between the files of one crate.

usage: scripts/import-cycles.py [--tests] [--no-parents] [--edges] SRC_DIR...

A file depends on another when its code names an item the other defines:
through `use crate::..`, `super::..`, `self::..`, a child module's path or
a glob (`use super::*`: each name of the file that the glob brings in).
Re-exports (`pub use`, `pub(crate) use`) are followed to the defining file
and are no edge of the re-exporting file: a facade is not a dependency.
`#[cfg(test)]` items are left out unless --tests. --no-parents drops a
file's edges to its ancestor modules (a child's `use super::..`), leaving
the circles between siblings and cousins. Prints each circle
(strongly connected set of files, more than one) and, with --edges, every
edge. Exit status 1 if there is a circle.

A lexical reading, not a compiler's: macros' bodies, type inference and
paths through external crates are not followed. It reads this project's
sources; it is not a general Rust resolver.
"""

import os
import re
import sys

ITEM = re.compile(
    r"\b(?:pub(?:\s*\([^)]*\))?\s+)?(?:unsafe\s+|const\s+|async\s+|extern\s+\"C\"\s+)*"
    r"(fn|struct|enum|const|static|type|trait|union|mod)\s+(?:mut\s+)?([A-Za-z_]\w*)"
)
MACRO = re.compile(r"\bmacro_rules!\s*([A-Za-z_]\w*)")
USE = re.compile(r"\b(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]*);")
PATH = re.compile(r"\b((?:crate|super|self|[A-Za-z_]\w*)(?:\s*::\s*(?:[A-Za-z_]\w*|\*))+)")
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def strip(text):
    """Comments, strings and char literals blanked (lengths kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif (m := re.match(r'b?r(#*)"', text[i:])) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find('"' + m.group(1), i + m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2 : j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('"' + re.sub(r"[^\n]", " ", text[i + 1 : j]) + '"')
            i = j + 1
        elif c == "'" and (m := re.match(r"'(\\.[^']*|[^\\'])'", text[i:])):
            out.append("' '" + " " * (m.end() - 3))
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def close_of(text, i):
    """Index just past the `}` that closes the `{` at i."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def item_end(text, i):
    """End of the item starting at i: its first `;` outside braces or its block."""
    for j in range(i, len(text)):
        if text[j] == ";":
            return j + 1
        if text[j] == "{":
            return close_of(text, j)
    return len(text)


TEST_ATTR = re.compile(r"#\[cfg\((?:test|any\(test\b[^\]]*)\)\]")


def split_tests(text):
    """(code with #[cfg(test)] items blanked, test item texts, test child modules)."""
    code, tests, test_mods = list(text), [], set()
    for m in TEST_ATTR.finditer(text):
        start = m.end()
        while (a := re.match(r"\s*#\[[^\]]*\]", text[start:])) is not None:
            start += a.end()
        end = item_end(text, start)
        body = text[start:end]
        if (mm := re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", body)) is not None:
            test_mods.add(mm.group(1))
        tests.append(body)
        for k in range(m.start(), end):
            if code[k] != "\n":
                code[k] = " "
    return "".join(code), tests, test_mods


def depth0(text):
    """Text at brace depth 0 (items of the module itself, not of impls or fns)."""
    out, depth = [], 0
    for c in text:
        if c == "}":
            depth -= 1
        out.append(c if depth == 0 or c == "\n" else " ")
        if c == "{":
            depth += 1
    return "".join(out)


def expand_use(tree):
    """`a::{b, c::{self, d}}` -> [[a, b], [a, c], [a, c, d]] (aliases: last word is the name)."""
    tree = re.sub(r"\s+", " ", tree).strip()

    def walk(prefix, s):
        s = s.strip()
        if not s:
            return []
        if "{" in s and (s.find("{") < s.find(",") if "," in s else True):
            head, rest = s.split("{", 1)
            inner = rest[: rest.rfind("}")]
            head_segs = [p for p in head.strip().rstrip(":").split("::") if p.strip()]
            res = []
            for part in split_top(inner):
                res += walk(prefix + [h.strip() for h in head_segs], part)
            return res
        alias = None
        if " as " in s:
            s, alias = [x.strip() for x in s.split(" as ", 1)]
        segs = [p.strip() for p in s.split("::") if p.strip()]
        if segs and segs[-1] == "self":
            segs = segs[:-1]
        return [(prefix + segs, alias)]

    return walk([], tree)


def split_top(s):
    parts, depth, cur = [], 0, []
    for c in s:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


class Crate:
    def __init__(self, src):
        self.src = src
        self.files = {}  # module path (tuple) -> file path
        root = "lib.rs" if os.path.exists(os.path.join(src, "lib.rs")) else "main.rs"
        self.load((), os.path.join(src, root), False)

    def load(self, mod, path, test):
        text = strip(open(path, encoding="utf-8").read())
        code, tests, test_mods = split_tests(text)
        top = depth0(code)
        info = {
            "path": path,
            "test": test,
            "code": code,
            "tests": tests,
            "items": {},  # name -> kind
            "uses": {},  # name -> (segments, is_reexport)
            "globs": [],  # (segments, is_reexport)
            "mods": set(),
        }
        for m in ITEM.finditer(top):
            info["items"][m.group(2)] = m.group(1)
        for m in MACRO.finditer(code):
            info["items"][m.group(1)] = "macro"
        for m in USE.finditer(top):
            reexport = m.group(1) is not None
            for segs, alias in expand_use(m.group(2)):
                if segs and segs[-1] == "*":
                    info["globs"].append((segs[:-1], reexport))
                elif segs:
                    info["uses"][alias or segs[-1]] = (segs, reexport)
        self.files[mod] = info
        base = os.path.dirname(path)
        name = os.path.basename(path)
        if name not in ("lib.rs", "main.rs", "mod.rs"):
            base = os.path.join(base, name[:-3])
        for m in re.finditer(r"\b(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text):
            child = m.group(1)
            for cand in (os.path.join(base, child + ".rs"), os.path.join(base, child, "mod.rs")):
                if os.path.exists(cand):
                    info["mods"].add(child)
                    self.load(mod + (child,), cand, test or child in test_mods)
                    break

    def is_module(self, mod):
        return mod in self.files

    def start(self, mod, first):
        """Module a path's first segment names, seen from `mod`."""
        if first == "crate":
            return ()
        if first == "super":
            return mod[:-1]
        if first == "self":
            return mod
        if first in self.files[mod]["mods"]:
            return mod + (first,)
        return None

    def resolve_path(self, mod, segs, seen=None):
        """File that defines what `segs` names, seen from module `mod` (None: elsewhere)."""
        seen = seen or set()
        key = (mod, tuple(segs))
        if key in seen:
            return None
        seen.add(key)
        cur = self.start(mod, segs[0])
        rest = segs[1:]
        if cur is None:
            # A name in scope: an item or import of `mod` itself.
            return self.resolve_name(mod, segs[0], seen, rest)
        while rest and rest[0] == "super":
            cur, rest = cur[:-1], rest[1:]
        while rest:
            if rest[0] in self.files[cur]["mods"]:
                cur, rest = cur + (rest[0],), rest[1:]
                continue
            return self.resolve_name(cur, rest[0], seen, rest[1:])
        return self.files[cur]["path"]

    def resolve_name(self, mod, name, seen, rest=()):
        if (mod, name) in seen:
            return None
        seen.add((mod, name))
        info = self.files[mod]
        if name in info["items"]:
            return info["path"]
        if name in info["uses"]:
            segs, _ = info["uses"][name]
            return self.resolve_path(mod, list(segs) + list(rest), seen)
        for segs, _ in info["globs"]:
            target = self.resolve_module(mod, segs)
            if target is not None and target != mod:
                got = self.resolve_name(target, name, seen, rest)
                if got is not None:
                    return got
        return None

    def resolve_module(self, mod, segs):
        if not segs:
            return None
        cur = self.start(mod, segs[0])
        if cur is None:
            if segs[0] in self.files[mod]["uses"]:
                return self.resolve_module(mod, list(self.files[mod]["uses"][segs[0]][0]) + segs[1:])
            return None
        for s in segs[1:]:
            if s == "super":
                cur = cur[:-1]
            elif s in self.files[cur]["mods"]:
                cur = cur + (s,)
            else:
                return None
        return cur

    def glob_names(self, mod, seen=None):
        seen = seen or set()
        if mod in seen:
            return set()
        seen.add(mod)
        info = self.files[mod]
        names = set(info["items"]) | set(info["uses"])
        for segs, _ in info["globs"]:
            t = self.resolve_module(mod, segs)
            if t is not None:
                names |= self.glob_names(t, seen)
        return names

    def edges(self, with_tests, no_parents=False):
        out = {}
        mod_of = {info["path"]: mod for mod, info in self.files.items()}
        for mod, info in self.files.items():
            if info["test"] and not with_tests:
                continue
            me = info["path"]
            deps = out.setdefault(me, set())
            # In an inline `mod tests { .. }`, `super` is this file's module.
            inline = re.compile(r"\s*(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+\w+\s*\{")
            tests = [re.sub(r"(?<!::)\bsuper::", "self::", t) if inline.match(t) else t for t in info["tests"]]
            texts = [info["code"]] + (tests if with_tests else [])
            for text in texts:
                uses = [
                    (segs, m.group(1) is not None)
                    for m in USE.finditer(text)
                    for segs, _ in expand_use(m.group(2))
                ]
                body = USE.sub(lambda m: " " * len(m.group(0)), text)
                idents = set(IDENT.findall(body))
                for segs, reexport in uses:
                    if reexport or not segs:
                        continue
                    if segs[-1] == "*":
                        target = self.resolve_module(mod, segs[:-1])
                        if target is None:
                            continue
                        for name in idents & self.glob_names(target):
                            got = self.resolve_name(target, name, set())
                            if got:
                                deps.add(got)
                    else:
                        got = self.resolve_path(mod, segs)
                        if got:
                            deps.add(got)
                for m in PATH.finditer(body):
                    segs = [s.strip() for s in m.group(1).split("::")]
                    if segs[0] not in ("crate", "super", "self") and segs[0] not in info["mods"]:
                        if segs[0] not in info["uses"]:
                            continue
                    got = self.resolve_path(mod, segs)
                    if got:
                        deps.add(got)
            deps.discard(me)
            if no_parents:
                deps -= {d for d in deps if mod_of[d] == mod[: len(mod_of[d])]}
        return out


def circles(graph):
    """Tarjan's strongly connected components with more than one file."""
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sccs


def main(argv):
    with_tests = "--tests" in argv
    show = "--edges" in argv
    no_parents = "--no-parents" in argv
    found = 0
    for src in [a for a in argv if not a.startswith("--")]:
        graph = Crate(src).edges(with_tests, no_parents)
        if show:
            for a in sorted(graph):
                for b in sorted(graph[a]):
                    print(f"{a} -> {b}")
        for comp in circles(graph):
            found += 1
            inside = [f"{a} -> {b}" for a in comp for b in sorted(graph[a]) if b in comp]
            print(f"circle: {' , '.join(comp)}\n    " + "\n    ".join(inside))
        n_edges = sum(len(v) for v in graph.values())
        print(f"{src}: {len(graph)} files, {n_edges} edges, {len(circles(graph))} circles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
