#!/usr/bin/env python3
"""sm70_results.py — writes the sm_70 audit results kept under bench/results/.

    scripts/sm70_results.py [BUILD_DIR]      (default: build; build the target vxqa_sm70 first)

Runs the ctest commands of the SASS audit (sass.*) and of the Config report
(sm70.config_report) exactly as CMake registered them, and writes their output, under a line
naming the commit, to

    bench/results/DATE-sm70-sass-audit.txt
    bench/results/DATE-sm70-config-report.txt

DATE is today (UTC). The tools print paths relative to the repository, so the files name
nothing of the machine. A commit with uncommitted changes to tracked files is marked so.
Exit status 1 when a test fails (its output is still written), 2 when there is nothing to run.
Python 3 standard library only.
"""

import datetime
import json
import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = [
    # (file name suffix, ctest regex, what the header says ran)
    ("sm70-sass-audit.txt", r"^sass\.", "scripts/sass_audit.py on every sm_70, sm_80 and sm_90 cubin (ctest sass.*)"),
    ("sm70-config-report.txt", r"^sm70\.config_report$",
     "test/sm70/config_report.cpp (ctest sm70.config_report)"),
]


def git(*args):
    return subprocess.run(["git", "-C", REPO_ROOT] + list(args), stdout=subprocess.PIPE,
                          universal_newlines=True, check=True).stdout.strip()


def ctest_commands(build_dir, regex):
    """[(name, argv, working directory)] of the ctest tests matching regex, in ctest's order."""
    listing = subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1", "-R", regex],
                             stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    tests = []
    for test in json.loads(listing).get("tests", []):
        cwd = build_dir
        for prop in test.get("properties", []):
            if prop["name"] == "WORKING_DIRECTORY":
                cwd = prop["value"]
        tests.append((test["name"], test["command"], cwd))
    return tests


def main(argv):
    build_dir = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(REPO_ROOT, "build"))
    commit = git("rev-parse", "--short", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " with uncommitted changes"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    failed = []
    for suffix, regex, what in RESULTS:
        tests = ctest_commands(build_dir, regex)
        if not tests:
            print("sm70_results: no ctest matches %s in %s (configure with VXQA_SM70_AUDIT=ON)"
                  % (regex, build_dir), file=sys.stderr)
            return 2
        path = os.path.join(REPO_ROOT, "bench", "results", "%s-%s" % (date, suffix))
        with open(path, "w", encoding="utf-8") as out:
            out.write("# %s, at commit %s\n" % (what, commit))
            for name, command, cwd in tests:
                run = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     universal_newlines=True)
                out.write(run.stdout)
                if run.returncode != 0:
                    failed.append(name)
        print("sm70_results: wrote %s (%d test%s)" % (os.path.relpath(path, REPO_ROOT), len(tests),
                                                     "" if len(tests) == 1 else "s"))
    if failed:
        print("sm70_results: failed: %s" % ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
