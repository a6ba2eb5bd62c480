#!/usr/bin/env python3
"""Tells racecheck's known false positive apart from every other hazard in a log of
`compute-sanitizer --tool racecheck --racecheck-report hazard`.

The known one (docs/performance.md, "The racecheck finding: racecheck's, not the code's"):
in the SM70 body at head dim 512, a team's merge stores (decode_cta_sm70.cuh:180, :183-:184) and
the other team's merge loads (:285, :289-:291), which a CTA barrier that every warp executes
separates (BAR.SYNC 0 in the SASS). Racecheck flags some of them in some runs and none in
others, on the same binary and data, and the loads it flags return what was stored (every
output matches the float64 reference). Anything else is a hazard to look at. The lines are
matched exactly, and `--check-source` (a CPU test) fails when those lines of the header no
longer hold those stores and loads, so that the list is looked at again when the code moves.

Usage: racecheck_known.py LOG
       racecheck_known.py --check-source include/vxqa/kernel/decode_cta_sm70.cuh
Prints one line; exit 0 when the log has no hazard or only the known ones (or the header's
lines are the listed ones), 1 otherwise (also when the log has no RACECHECK SUMMARY: the run
did not finish)."""
import re
import sys

# Each known line of decode_cta_sm70.cuh, with what it must hold.
KNOWN_WRITE_LINES = {180: "*reinterpret_cast<float2*>(merge_o + index) =",
                     183: "merge_ml[softmax::softmax_row(lane)] = row.m;",
                     184: "merge_ml[8 + softmax::softmax_row(lane)] = row.l;"}
KNOWN_READ_LINES = {285: "warp_ml(smem, t, part)[head]",
                    289: "softmax::rescale_factor(ml[head], m)",
                    290: "ml[8 + head] * weight",
                    291: "warp_o(smem, t, part)[MergeLayout::index(head, part_dim)]"}
KNOWN_CONFIG = "DecodeConfig<(int)512,"
KNOWN_WRITES = {f"decode_cta_sm70.cuh:{n}" for n in KNOWN_WRITE_LINES}
KNOWN_READS = {f"decode_cta_sm70.cuh:{n}" for n in KNOWN_READ_LINES}


def check_source(header):
    lines = open(header).read().split("\n")
    wrong = [n for n, text in {**KNOWN_WRITE_LINES, **KNOWN_READ_LINES}.items()
             if n > len(lines) or text not in lines[n - 1]]
    if wrong:
        print(f"racecheck_known: lines {wrong} of {header} no longer hold the merge's stores and loads "
              "that the known false positive lists: look at the finding again and update the lists")
        return 1
    print(f"racecheck_known: the listed lines of {header} are the merge's stores and loads")
    return 0


def main(path):
    text = open(path, errors="replace").read()
    if "RACECHECK SUMMARY" not in text:
        print(f"racecheck_known: {path} has no RACECHECK SUMMARY (the run did not finish)")
        return 1
    summary = re.search(r"RACECHECK SUMMARY: (\d+) hazards displayed \((\d+) errors, (\d+) warnings\)", text)
    if summary and int(summary.group(1)) < int(summary.group(2)) + int(summary.group(3)):
        print(f"racecheck_known: {path} shows {summary.group(1)} of its hazards: run with a larger --print-limit")
        return 1
    known = other = 0
    # A hazard report: "Potential XXX hazard detected ...", then its Write and Read lines.
    for report in re.split(r"========= (?:Error|Warning): ", text)[1:]:
        if "hazard" not in report.split("\n", 1)[0]:
            continue
        write = re.search(r"Write Thread .* in (\S+:\d+)", report)
        read = re.search(r"Read Thread .* in (\S+:\d+)", report)
        is_known = (write and read and write.group(1) in KNOWN_WRITES and read.group(1) in KNOWN_READS and
                    KNOWN_CONFIG in report)
        if is_known:
            known += 1
        else:
            other += 1
    print(f"racecheck_known: {known} known false positive(s), {other} other hazard(s)")
    # Every hazard the summary counts must be one read here: an error that is not a hazard
    # report (or a format this does not parse) fails rather than passing unread.
    displayed = int(summary.group(1)) if summary else -1
    if known + other != displayed:
        print(f"racecheck_known: the summary counts {displayed} hazards, {known + other} were read")
        return 1
    return 1 if other else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check-source":
        sys.exit(check_source(sys.argv[2]))
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
