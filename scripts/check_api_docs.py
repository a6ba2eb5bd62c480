#!/usr/bin/env python3
"""check_api_docs.py — every public name of include/vxqa is in the API reference.

    check_api_docs.py [--list] [REFERENCE.md]

Public names: the types (struct, class, enum, using aliases), functions and constants that
a header of include/vxqa declares at namespace scope (column 0, the project's style), in
namespace vxqa or one of its sub-namespaces other than `detail`. Each must appear in the
reference (docs/api.md by default) in backticks, alone or qualified (`mma::QkConsumer`,
`QkConsumer<G>`, `QkConsumer::run`). Exit 1 lists the missing ones; --list prints them all.
Python 3 standard library only.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TYPE_RE = re.compile(r"^(?:template\s*<.*>\s*)?(?:struct|class|enum class|enum|union)\s+([A-Za-z_]\w*)\s*(?:[:{;<]|final|$)")
USING_RE = re.compile(r"^using\s+([A-Za-z_]\w*)\s*=")
CONST_RE = re.compile(r"^inline constexpr\s+[\w:<>]+\s+([A-Za-z_]\w*)\s*=")
FUNC_RE = re.compile(r"^(?:template\s*<.*>\s*)?(?:(?:VXQA_HD|VXQA_DEVICE|inline|static|constexpr|__global__|__device__|__host__|__launch_bounds__\([^)]*\))\s+)*"
                     r"[\w:<>,\s\*&]+?[\s\*&]([A-Za-z_]\w*)\s*\(")
LAUNCH_BOUNDS_RE = re.compile(r"__launch_bounds__\([^)]*\)\s*")
NAMESPACE_RE = re.compile(r"^namespace\s+(\w+)\s*\{")
END_NAMESPACE_RE = re.compile(r"^\}\s*//\s*namespace\s+(\w+)")
SKIP = {"operator", "if", "for", "while", "return", "switch", "sizeof", "static_assert", "asm", "volatile",
        "alignas", "__launch_bounds__"}


def public_names():
    names = {}
    for dirpath, _, files in os.walk(os.path.join(ROOT, "include", "vxqa")):
        for f in sorted(files):
            if not f.endswith((".cuh", ".h")):
                continue
            path = os.path.join(dirpath, f)
            stack = []
            pending_template = False
            with open(path, encoding="utf-8") as fh:
                for line in fh:
                    m = NAMESPACE_RE.match(line)
                    if m:
                        stack.append(m.group(1))
                        continue
                    if END_NAMESPACE_RE.match(line) and stack:
                        stack.pop()
                        continue
                    if not stack or stack[0] != "vxqa" or "detail" in stack:
                        continue
                    text = line.rstrip("\n")
                    if not text[:1].isalpha() and not text.startswith("_"):
                        continue  # namespace scope only: members are documented with their type
                    if text.startswith("template") and text.rstrip().endswith(">"):
                        pending_template = True
                        continue
                    text = LAUNCH_BOUNDS_RE.sub("", text)  # kernels: `__global__ void __launch_bounds__(N) name(`
                    for rx in (TYPE_RE, USING_RE, CONST_RE, FUNC_RE):
                        m = rx.match(text)
                        if m and m.group(1) not in SKIP:
                            names.setdefault(m.group(1), os.path.relpath(path, ROOT))
                            break
                    pending_template = False
    return names


def main(argv):
    listing = "--list" in argv
    args = [a for a in argv if a != "--list"]
    ref_path = args[0] if args else os.path.join(ROOT, "docs", "api.md")
    names = public_names()
    if listing:
        for name, where in sorted(names.items(), key=lambda x: (x[1], x[0])):
            print("%-40s %s" % (name, where))
        return 0
    with open(ref_path, encoding="utf-8") as fh:
        ref = fh.read()
    documented = set()  # every part of a qualified name in backticks: `mma::QkConsumer::run`
    for span in re.findall(r"`([^`]+)`", ref):
        if "/" not in span and not span.endswith((".cuh", ".h", ".md", ".py")):  # not a path
            documented.update(re.findall(r"[A-Za-z_]\w*", span))
    missing = sorted((n, w) for n, w in names.items() if n not in documented)
    for name, where in missing:
        print("undocumented public name: %s (%s)" % (name, where))
    print("%d public names, %d documented in %s" % (len(names), len(names) - len(missing),
                                                     os.path.relpath(ref_path, ROOT)))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
