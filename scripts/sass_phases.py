#!/usr/bin/env python3
"""sass_phases.py — where the decode main loop's instructions go, per phase, from -lineinfo.

    sass_phases.py [--nvdisasm PATH] [--kernel REGEX] [--check] CUBIN...

For every decode kernel of each CUBIN (built with -lineinfo), finds the main loop the way
sass_audit.py does (the backward-branch loop holding the most HMMAs: one pass per 32-token
tile of a warp on the SM70 path, per 16-token tile on the SM80 path) and attributes each of
its instructions to a phase by its inline chain (`nvdisasm -gi`; on sm_90 only the
innermost frame, `-g`), innermost frame first:

  load       register_staged_load / global_load / cp_async(_tile_load) — K and V alike
             (one piece of code serves both; they are half each)
  convert    numeric/e5m2.cuh, e4m3.cuh, kv_decode.cuh, arch/cvt_e4m3.cuh (FP8 -> fp16)
  publish    pipeline/smem_publisher.cuh (register stages -> shared memory)
  qk / pv    the QK and PV consumers and their MMA atoms
  softmax    online_softmax / register_softmax / movmatrix, the attention variant's score
             (attention_variant.cuh), and the kernel's score and rescale lines
  pages      the block-table lookups (paged_kv.cuh, lane_row_offset)
  sync       BAR, WARPSYNC, DEPBAR, NOP (opcode wins over the source line)
  other      loop control and address arithmetic the chain gives to no piece

and prints, per kernel: the counts, instructions per KV KiB of the tile, and on sm_70 an
estimate of the V100 (80 SMs, 4 schedulers, 1.53 GHz, 900 GB/s) issue time against the
memory time of the same bytes: issue-bound at one instruction per scheduler per cycle,
with perfect overlap, so an upper bound, labelled as an estimate.

Exit status 1 when a CUBIN holds no kernel matching --kernel or a matching kernel's loop is
not found (with or without --check: a cubin that yields no row is never a pass); --check
also exits 1 where inline chains exist (not sm_90) and more than a quarter of a loop is
`other` (the attribution would say little). test/sm70/fixtures/ holds a crafted
`nvdisasm` dump for the failing cases (ctest sass_phases.*). Python 3 standard library only.

--baseline FILE also exits 1 where a kernel FILE lists is missing or has other counts (in
all or in any phase): CI's sass.phases checks the Configs of test/sm70/decode_d*.cu against
test/sm70/sass_phases_baseline.txt, so that a change meant to cost nothing when it is off
(a variant, an option) shows that it does. --write-baseline FILE writes the rows read.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_audit  # noqa: E402  (the loop finder and the opcode matcher)

PHASES = ["load", "convert", "publish", "qk", "softmax", "pv", "pages", "sync", "other"]
FILE_PHASES = [
    (r"numeric/(e5m2|e4m3|kv_decode)\.cuh$|arch/cvt_e4m3\.cuh$", "convert"),
    (r"pipeline/(register_staged_load|cp_async_tile_load)\.cuh$|arch/(global_load|cp_async)\.cuh$", "load"),
    (r"pipeline/smem_publisher\.cuh$", "publish"),
    (r"mma/(sm80_)?qk_consumer\.cuh$", "qk"),
    (r"mma/(sm80_)?pv_consumer\.cuh$", "pv"),
    (r"softmax/(online|register)_softmax\.cuh$|arch/movmatrix\.cuh$|kernel/attention_variant\.cuh$", "softmax"),
    (r"paged/paged_kv\.cuh$", "pages"),
]
# Lines of the kernel bodies, by what they call.
LINE_PHASES = [
    (r"Qk::run", "qk"),
    (r"Pv::run", "pv"),
    (r"load_piece|piece\.load|Load::issue|\bissue\(|cp_async_(commit|wait)", "load"),
    (r"store_k|store_v|publish", "publish"),
    (r"softmax|store_scores|rescale|alpha|qk_scale_log2", "softmax"),
    (r"row_offset", "pages"),
]
KERNEL_FILES = re.compile(r"kernel/(decode_kernel|decode_cta_sm70|decode_cta_sm80|decode_cta_common)\.cuh$")
SYNC_OPS = [sass_audit.OpPattern(p) for p in ("BAR", "WARPSYNC", "DEPBAR", "NOP", "BSSY", "BSYNC")]
FRAME_RE = re.compile(r'//## File "([^"]+)", line (\d+)')
FUNC_RE = re.compile(r"^//-+ \.text\.(\S+) -+$")
LABEL_RE = re.compile(r"^(\.L_x_\d+):")
BRANCH_LABEL_RE = re.compile(r"`\((\.L_x_\d+)\)")
V100 = dict(sms=80, schedulers=4, ghz=1.53, gbs=900.0)


def run(argv):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if proc.returncode != 0:
        raise RuntimeError("`%s` failed (exit %d): %s" % (" ".join(argv), proc.returncode, proc.stderr))
    return proc.stdout


class Source:
    """Source lines, read once per file."""

    def __init__(self):
        self.files = {}

    def line(self, path, n):
        if path not in self.files:
            try:
                with open(path, encoding="utf-8") as f:
                    self.files[path] = f.read().splitlines()
            except OSError:
                self.files[path] = []
        lines = self.files[path]
        return lines[n - 1] if 0 < n <= len(lines) else ""


def phase_of(op, chain, source):
    if any(p.matches(op) for p in SYNC_OPS):
        return "sync"
    for path, line in chain:  # innermost frame first
        for rx, phase in FILE_PHASES:
            if re.search(rx, path):
                return phase
        if KERNEL_FILES.search(path):
            text = source.line(path, line)
            for rx, phase in LINE_PHASES:
                if re.search(rx, text):
                    return phase
    return "other"


def parse(text):
    """{kernel name: [(address, opcode, text, chain)]} from `nvdisasm -gi`."""
    kernels, current, chain, pending, labels, waiting = {}, None, [], [], {}, []
    for line in text.splitlines():
        m = FUNC_RE.match(line.strip())
        if m:
            current = kernels.setdefault(m.group(1), [])
            chain, pending = [], []
            continue
        m = LABEL_RE.match(line)
        if m:
            waiting.append(m.group(1))
            continue
        frames = FRAME_RE.findall(line)
        if frames:
            pending.append((frames[0][0], int(frames[0][1])))
            continue
        m = sass_audit.INSTR_RE.match(line)
        if m and current is not None:
            if pending:
                chain, pending = pending, []
            body = m.group(2).strip().strip("{}").strip()
            tokens = body.split()
            if tokens and tokens[0].startswith("@"):
                tokens = tokens[1:]
            for label in waiting:
                labels[label] = m.group(1)
            waiting = []
            if tokens:
                current.append((m.group(1), tokens[0].rstrip(";"), body, list(chain)))
    # Branches name labels: give them the address sass_audit's loop finder reads.
    def address(match):
        return "0x" + labels.get(match.group(1), "0")
    return {name: [(a, o, BRANCH_LABEL_RE.sub(address, t), c) for a, o, t, c in body]
            for name, body in kernels.items()}


def config_of(demangled):
    """(head dim, element bytes, 'sm70' or 'sm80' body) from a decode_kernel<DecodeConfig<...>>."""
    m = re.search(r"DecodeConfig<(\d+), \(vxqa::KvType\)(\d)", demangled)
    if not m:
        return None
    # KvType's order in numeric/kv_type.cuh: 0 kUnset (never a Config), 1 kE5M2, 2 kFp16, 3 kE4M3.
    element_bytes = {"1": 1, "2": 2, "3": 1}
    if m.group(2) not in element_bytes:
        sys.exit("sass_phases: KvType %s in %s is not a cache format this script knows" % (m.group(2), demangled))
    return int(m.group(1)), element_bytes[m.group(2)]


BASELINE_HEADER = ("# sass_phases.py --write-baseline: cubin, arch, kernel, then the main loop's instructions\n"
                   "# in all and per phase (%s).\n"
                   "# A change to these counts is a change to the kernels' SASS: regenerate it only on purpose,\n"
                   "# and say why in docs/performance.md.\n" % ", ".join(PHASES))


def check_baseline(path, rows):
    """True when every kernel of the baseline file is among `rows` with the same counts."""
    ok = True
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            cubin, arch, kernel, *numbers = line.rstrip("\n").split("\t")
            want = [int(n) for n in numbers]
            got = rows.get((cubin, arch, kernel))
            if got is None:
                print("baseline: %s %s %s is in no cubin read" % (cubin, arch, kernel))
                ok = False
            elif got != want:
                diff = ", ".join("%s %d -> %d" % (name, w, g)
                                 for name, w, g in zip(["instr"] + PHASES, want, got) if w != g)
                print("baseline: %s %s %s changed: %s" % (cubin, arch, kernel, diff))
                ok = False
    print("baseline %s: %s" % (path, "every kernel's counts as committed" if ok else "DIFFERS"))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nvdisasm", default=os.environ.get("VXQA_NVDISASM") or shutil.which("nvdisasm"))
    ap.add_argument("--kernel", default=r"decode_kernel")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--baseline", help="fail where a kernel of this file has other per-phase counts, or is missing")
    ap.add_argument("--write-baseline", help="write every row's per-phase counts to this file")
    ap.add_argument("cubins", nargs="+")
    args = ap.parse_args()
    if not args.nvdisasm:
        sys.exit("no nvdisasm: pass --nvdisasm (CUDA 11.8's reads sm_70..sm_90 cubins)")
    source, failed = Source(), False
    rows = {}  # (cubin, arch, kernel) -> [total] + the phases' counts, for the baseline
    print("phase counts of the decode main loop (one pass = one warp tile), from nvdisasm -gi")
    print("%-10s %-6s %-60s %5s %5s %s  %s" % ("cubin", "arch", "kernel", "tile", "instr",
                                             " ".join("%7s" % p for p in PHASES), "instr/KiB"))
    for path in args.cubins:
        arch = re.search(r"\.(sm\d+)\.", os.path.basename(path))
        arch = arch.group(1) if arch else "?"
        # nvdisasm 11.8's inline chains (-gi) take minutes on an sm_90 cubin and then fail:
        # there, the innermost frame only (-g).
        dis = run([args.nvdisasm, "-g" if arch.startswith("sm9") else "-gi", "-c", path])
        kernels = parse(dis)
        names = [n for n in kernels if re.search(args.kernel, n)]
        if not names:
            print("%-10s %-6s no kernel matches --kernel %s (kernels: %s)"
                  % (os.path.basename(path)[:10], arch, args.kernel, ", ".join(kernels) or "none"))
            failed = True
            continue
        demangled = dict(zip(names, run(["c++filt"] + names).splitlines())) if names else {}
        for name in names:
            k = sass_audit.Kernel(name)
            k.instructions = [(a, o, t) for a, o, t, _ in kernels[name]]
            loop = k.main_loop()
            title = re.sub(r"^void vxqa::decode_kernel<vxqa::|>\s*>?\(vxqa::DecodeKernelArgs\)$", "",
                           demangled.get(name, name))
            title = re.sub(r"\(vxqa::[\w:]+\)", "", title)
            if not loop:
                print("%-10s %-6s %-60s  no main loop found" % (os.path.basename(path)[:10], arch, title[:60]))
                failed = True
                continue
            chains = {a: c for a, _, _, c in kernels[name]}
            counts = dict.fromkeys(PHASES, 0)
            for address, op, _ in loop:
                counts[phase_of(op, chains[address], source)] += 1
            cfg = config_of(demangled.get(name, ""))
            sm70_body = any(op.startswith("HMMA.884") for _, op, _ in loop)
            tokens = 32 if sm70_body else 16
            # A warp's pass reads its tile's K and V; at head dim 512 the SM70 body's two warps
            # share a tile (each its half of D for PV, both QK), so a pass stands for half of the
            # tile's bytes there; the SM80 body's warp takes a tile alone at every head dim.
            parts = 2 if cfg and cfg[0] > 256 and sm70_body else 1
            kib = tokens * cfg[0] * cfg[1] * 2 / 1024 / parts if cfg else float("nan")
            total = len(loop)
            rows[(os.path.basename(path), arch, title.strip())] = [total] + [counts[p] for p in PHASES]
            print("%-10s %-6s %-60s %5d %5d %s  %7.1f" % (os.path.basename(path)[:10], arch, title[:60], tokens, total,
                                                      " ".join("%7d" % counts[p] for p in PHASES), total / kib))
            if arch == "sm70" and cfg:
                issue_ns = total / V100["ghz"]  # one scheduler issues the tile's loop at IPC 1
                # An SM's schedulers each take a tile in that time.
                sm_gbs = V100["schedulers"] * kib * 1024 / issue_ns
                need = V100["gbs"] / V100["sms"]
                print("%-10s %-6s   V100 estimate: the loop at IPC 1 on each of 4 schedulers reads %.1f GB/s an SM, "
                      "%.1fx the %.1f GB/s an SM needs for 900 GB/s (an issue-bound upper bound with perfect "
                      "overlap: an estimate, not a measurement)" % ("", "", sm_gbs, sm_gbs / need, need))
            if args.check and counts["other"] > total / 4 and not arch.startswith("sm9"):
                print("  more than a quarter of the loop is unattributed")
                failed = True
    if args.write_baseline:
        with open(args.write_baseline, "w") as f:
            f.write(BASELINE_HEADER)
            for key in sorted(rows):
                f.write("\t".join(list(key) + [str(n) for n in rows[key]]) + "\n")
    if args.baseline and not check_baseline(args.baseline, rows):
        failed = True
    if failed:
        print("sass_phases: FAILED (see the rows above)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
