#!/usr/bin/env python3
"""Every GPU test case is in a ctest entry (test/CMakeLists.txt; runs without a GPU).

    check_tags.py GPU_TEST_DIR [REGISTERED_TAG ...]

REGISTERED_TAG: the tags ctest runs (gpu.NAME, gpu_sm70.NAME). Fails, naming what, when
  - a TEST_CASE of GPU_TEST_DIR/*.cu has no tags, or a tag that is not registered (a test
    case that no entry selects never runs in ctest); a hidden case ("[.]...", run by another
    test in a child process) is exempt, but its tags must be named in a string elsewhere
    (outside comments and TEST_CASE lines);
  - a registered tag selects no test case (without a GPU the binaries exit 77 before Catch2
    would fail it for --warn NoTests: this finds it on any machine);
  - no TEST_CASE is found at all.
"""
import glob
import os
import re
import sys

# TEST_CASE("name" ["more name"...], "[tag][tag]") at the start of a line.
START = re.compile(r"^[ \t]*TEST_CASE\s*\(", re.M)
FULL = re.compile(r'TEST_CASE\s*\(\s*(?:"(?:[^"\\\n]|\\.)*"\s*)+,\s*"((?:\[[^\]"]*\])+)"\s*\)')
TAG = re.compile(r"\[([^\]]*)\]")
COMMENT = re.compile(r"//[^\n]*")


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    directory, registered = argv[1], set(argv[2:])
    problems, used, cases = [], set(), 0
    sources = {path: open(path, encoding="utf-8").read() for path in sorted(glob.glob(os.path.join(directory, "*.cu")))}
    for path, text in sources.items():
        name = os.path.basename(path)
        for start in START.finditer(text):
            cases += 1
            line = text.count("\n", 0, start.start()) + 1
            match = FULL.match(text, text.index("TEST_CASE", start.start()))
            if not match:
                problems.append(f"{name}:{line}: a TEST_CASE without a tag string")
                continue
            tags = TAG.findall(match.group(1))
            if "." in tags or any(t.startswith(".") for t in tags):
                others = [t for t in tags if not t.startswith(".")]
                rest = "".join(FULL.sub("", COMMENT.sub("", s)) for s in sources.values())
                for t in others:
                    if f'"[{t}]"' not in rest:
                        problems.append(f"{name}:{line}: hidden tag [{t}] is run by nothing (no \"[{t}]\" elsewhere)")
                continue
            used.update(tags)
            for t in tags:
                if t not in registered:
                    problems.append(f"{name}:{line}: tag [{t}] is in no ctest entry (name a file after it, or add it "
                                    "to GPU_EXTRA_TAGS in test/CMakeLists.txt)")
    for t in sorted(registered - used):
        problems.append(f"registered tag [{t}] selects no test case")
    if cases == 0:
        problems.append(f"no TEST_CASE found in {directory}/*.cu")
    for p in problems:
        print(p)
    if problems:
        print(f"check_tags: {len(problems)} problem(s) in {cases} test cases")
        return 1
    print(f"check_tags: {cases} test cases in {len(sources)} files, every tag in a ctest entry: "
          f"{' '.join(sorted(registered))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
