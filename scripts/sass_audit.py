#!/usr/bin/env python3
"""sass_audit.py — checks the SASS of a cubin (sm_70, or sm_80/sm_90) against expectations in its source.

    sass_audit.py [--cuobjdump PATH] --source FILE [--source FILE]... [--expect-arch sm_70]
                  [--toolchain NAME] CUBIN

Runs `cuobjdump -res-usage` and `cuobjdump -sass` on CUBIN, prints one row per kernel
(registers, static shared memory, stack frame, local memory, counts of the instructions that
matter for vxqa on Volta, total instructions) and, under a kernel whose HMMAs sit in a loop,
a `main loop` row with the same counts for that loop's body alone: the instructions from the
target of its backward branch to the branch (of the innermost loops, the one whose body holds
the most HMMAs, the shortest of equal ones; out-of-line blocks the body jumps to are not
counted). In the decode kernels that loop runs
once per 32-token tile of a warp on the SM70 path, per 16-token tile on the SM80 path. It then checks every kernel against the `vxqa-audit:`
comment lines of the --source files:

    // vxqa-audit: kernel=REGEX [require=OP,...] [loop-require=OP,...] [forbid=OP,...]
    //             [max-registers=N] [max-stack=N] [max-local=N] [max-shared=N]
    //             [max-instructions=N] [toolchain=REGEX]

  kernel=REGEX     the line applies to every kernel whose mangled or demangled name
                   re.search-matches REGEX (no spaces: write \\s). It must match at least one.
  require=OP,...   each OP must appear at least once in the kernel's SASS (anywhere).
  loop-require=OP,...  each OP must appear at least once in the kernel's main loop (the
                   `main loop` row: the KV loads of a decode kernel, not its Q load). A kernel
                   without a main loop fails the line.
  forbid=OP,...    no OP may appear.
  max-registers=N  registers per thread <= N.
  max-stack=N      stack frame bytes <= N (default 0: no spills, no stack).
  max-local=N      local memory bytes per thread <= N (default 0).
  max-shared=N     static shared memory bytes <= N (default: unchecked).
  max-instructions=N  SASS instructions (the `instrs` column: trailing NOP padding and the
                   final self-branch not counted) <= N (default: unchecked).
  toolchain=REGEX  the line applies only when --toolchain NAME re.search-matches REGEX
                   (e.g. toolchain=nvrtc128 for an expectation only 12.8's ptxas meets).
                   REGEX must match at least one of the known toolchains (KNOWN_TOOLCHAINS:
                   the names test/sm70/CMakeLists.txt passes), and a source with such a line
                   needs --toolchain, itself one of them: a line that could never apply, or a
                   run that cannot tell whether it does, is an error, not a skip.

An OP is an opcode with optional modifiers, e.g. HMMA.884, LDG.E.128, LDL, BAR. It matches an
instruction whose opcode is the same and whose modifiers include all of OP's, in any order:
LDG.E.128 matches LDG.E.128.CONSTANT.SYS, LDL matches LDL.LU.64, HMMA.884 matches
HMMA.884.F32.F32.STEP0.

Paths it prints (the cubin, the sources of the vxqa-audit lines) are relative to the
repository (the directory above scripts/), or file names where they lie outside it, so its
output names nothing of the machine it ran on; cuobjdump is named by its release.

Several lines may match one kernel; all of them apply. Nothing passes by default:

  - at least one --source is required, each with a vxqa-audit line, and at least one line
    must apply to the toolchain;
  - every kernel of the cubin must be covered by a line that applies;
  - every kernel needs its resource data (REG, STACK, SHARED, LOCAL from
    `cuobjdump -res-usage`) and a non-empty SASS body: a value cuobjdump did not print is a
    violation, never read as 0.

Exit status: 0 when every check holds, 1 on a violation (each one is printed), 2 on usage
errors (no --source, an unknown toolchain), a missing file, a source without any
vxqa-audit line, or a cuobjdump failure. test/sm70/fixtures/ holds crafted dumps, each
showing one of these checks fail (ctest sass_audit.*). Python 3 standard library only.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

# Count columns of the table: (header, opcode pattern counted).
COUNT_COLUMNS = [
    ("HMMA.884", "HMMA.884"),
    ("HMMA.16816", "HMMA.16816"),
    ("LDGSTS", "LDGSTS"),
    ("LDG.128", "LDG.128"),
    ("LDS.128", "LDS.128"),
    ("STS.128", "STS.128"),
    ("LDL", "LDL"),
    ("STL", "STL"),
    ("BAR", "BAR"),
    ("PRMT", "PRMT"),
]

AUDIT_KEYS = {"kernel", "require", "loop-require", "forbid", "max-registers", "max-stack",
              "max-local", "max-shared", "max-instructions", "toolchain"}

# The --toolchain names test/sm70/CMakeLists.txt passes: nvcc 11.8 for sm_70, sm_80, sm_90,
# and NVRTC 12.8 for sm_70. A toolchain= regex must match one of them.
KNOWN_TOOLCHAINS = ["cu118", "cu118.sm80", "cu118.sm90", "nvrtc128"]

# What every kernel's `cuobjdump -res-usage` line must state (a missing one is a violation).
RESOURCE_KEYS = ["REG", "STACK", "SHARED", "LOCAL"]

DEFAULT_CUOBJDUMP_CANDIDATES = [
    "/usr/lib/nvidia-cuda-toolkit/bin/cuobjdump",  # Debian's CUDA 11.8 (when installed there)
    "/usr/bin/cuobjdump",                          # Debian's CUDA 11.8 (nvidia-cuda-toolkit)
]


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class UsageError(Exception):
    pass


def shown_path(path):
    """`path` as printed: relative to the repository, or its file name when outside it."""
    absolute = os.path.abspath(path)
    if os.path.commonpath([absolute, REPO_ROOT]) == REPO_ROOT:
        return os.path.relpath(absolute, REPO_ROOT)
    return os.path.basename(absolute)


# --------------------------------------------------------------------------------------------
# Opcode patterns


def split_opcode(text):
    parts = text.split(".")
    return parts[0].upper(), [p.upper() for p in parts[1:] if p]


class OpPattern:
    def __init__(self, text):
        if not re.fullmatch(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*", text):
            raise UsageError("bad opcode pattern %r (want e.g. HMMA.884 or LDG.E.128)" % text)
        self.text = text
        self.base, mods = split_opcode(text)
        self.mods = set(mods)

    def matches(self, opcode):
        base, mods = split_opcode(opcode)
        return base == self.base and self.mods.issubset(mods)


# --------------------------------------------------------------------------------------------
# Expectations


class Expectation:
    def __init__(self, path, line_no, text):
        self.where = "%s:%d" % (shown_path(path), line_no)
        self.text = text.strip()
        self.kernel_re = None
        self.require = []
        self.loop_require = []
        self.forbid = []
        self.max_registers = None
        self.max_stack = 0
        self.max_local = 0
        self.max_shared = None
        self.max_instructions = None
        self.toolchain_re = None
        seen = set()
        for token in self.text.split():
            if "=" not in token:
                raise UsageError("%s: vxqa-audit: expected key=value, got %r" % (self.where, token))
            key, value = token.split("=", 1)
            if key not in AUDIT_KEYS:
                raise UsageError("%s: vxqa-audit: unknown key %r (known: %s)"
                                 % (self.where, key, ", ".join(sorted(AUDIT_KEYS))))
            if key in seen:
                raise UsageError("%s: vxqa-audit: key %r given twice" % (self.where, key))
            seen.add(key)
            if key in ("kernel", "toolchain"):
                try:
                    rx = re.compile(value)
                except re.error as e:
                    raise UsageError("%s: vxqa-audit: bad %s regex %r: %s"
                                     % (self.where, key, value, e))
                if key == "kernel":
                    self.kernel_re = rx
                else:
                    if not any(rx.search(t) for t in KNOWN_TOOLCHAINS):
                        raise UsageError("%s: vxqa-audit: toolchain=%s matches no known toolchain "
                                         "(%s): the line would never apply"
                                         % (self.where, value, ", ".join(KNOWN_TOOLCHAINS)))
                    self.toolchain_re = rx
            elif key in ("require", "loop-require", "forbid"):
                pats = [OpPattern(p) for p in value.split(",") if p]
                if not pats:
                    raise UsageError("%s: vxqa-audit: empty %s=" % (self.where, key))
                getattr(self, key.replace("-", "_")).extend(pats)
            else:
                try:
                    n = int(value, 0)
                except ValueError:
                    raise UsageError("%s: vxqa-audit: %s wants an integer, got %r"
                                     % (self.where, key, value))
                setattr(self, key.replace("-", "_"), n)
        if self.kernel_re is None:
            raise UsageError("%s: vxqa-audit: missing kernel=REGEX" % self.where)

    def applies_to(self, kernel):
        return bool(self.kernel_re.search(kernel.name) or self.kernel_re.search(kernel.demangled))

    def applies_to_toolchain(self, toolchain):
        return self.toolchain_re is None or bool(self.toolchain_re.search(toolchain))


def read_expectations(paths):
    expectations = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
        except OSError as e:
            raise UsageError("cannot read source %s: %s" % (path, e))
        for i, line in enumerate(lines, 1):
            m = re.search(r"//\s*vxqa-audit:(.*)$", line)
            if m:
                expectations.append(Expectation(path, i, m.group(1)))
    return expectations


# --------------------------------------------------------------------------------------------
# cuobjdump


class Kernel:
    def __init__(self, name):
        self.name = name
        self.demangled = name
        self.resources = {}
        self.instructions = []  # (address, opcode, full text)

    def res(self, key):
        """The resource value cuobjdump printed, or None when it printed none (never 0)."""
        return self.resources.get(key)

    def count(self, pattern):
        return sum(1 for _, op, _ in self.instructions if pattern.matches(op))

    def main_loop(self):
        """The innermost backward-branch loop holding the most HMMA (any shape), or None; of
        equal ones, the shortest (a kernel with two variants of its loop reports the leaner)."""
        hmma = OpPattern("HMMA")
        loops = []
        for address, op, text in self.instructions:
            target = BRA_TARGET_RE.search(text) if split_opcode(op)[0] == "BRA" else None
            if not target:
                continue
            end, start = int(address, 16), int(target.group(1), 16)
            if start >= end:
                continue
            body = [i for i in self.instructions if start <= int(i[0], 16) <= end]
            n = sum(1 for _, o, _ in body if hmma.matches(o))
            if n:
                loops.append((start, end, body, n))
        innermost = [l for l in loops
                     if not any(o is not l and l[0] <= o[0] and o[1] <= l[1] for o in loops)]
        if not innermost:
            return None
        return max(innermost, key=lambda l: (l[3], -len(l[2])))[2]

    def examples(self, pattern, limit=3):
        return ["/*%s*/ %s" % (addr, text) for addr, op, text in self.instructions
                if pattern.matches(op)][:limit]


def find_cuobjdump(explicit):
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise UsageError("cuobjdump not executable: %s" % explicit)
        return explicit
    env = os.environ.get("VXQA_CUOBJDUMP")
    if env:
        return find_cuobjdump(env)
    for candidate in DEFAULT_CUOBJDUMP_CANDIDATES:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("cuobjdump")
    if found:
        return found
    raise UsageError("no cuobjdump found; pass --cuobjdump (CUDA 11.8's reads sm_70 cubins)")


def tool_release(cuobjdump):
    """'cuobjdump 11.8' from `cuobjdump --version` (its path says nothing about the cubin)."""
    m = re.search(r"release (\d+\.\d+)", run_tool([cuobjdump, "--version"]))
    return "cuobjdump %s" % (m.group(1) if m else "of unknown release")


def run_tool(argv):
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True)
    except OSError as e:
        raise UsageError("cannot run %s: %s" % (argv[0], e))
    if proc.returncode != 0:
        raise UsageError("`%s` failed (exit %d):\n%s%s" % (" ".join(argv), proc.returncode,
                                                          proc.stdout, proc.stderr))
    return proc.stdout


BRA_TARGET_RE = re.compile(r"BRA(?:\.\w+)*\s+(?:`?\(?)0x([0-9a-fA-F]+)")
INSTR_RE = re.compile(r"^\s*/\*([0-9a-fA-F]{4,})\*/\s+(.*?)\s*;\s*(?:/\*.*\*/\s*)?$")
FUNC_RE = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")
ARCH_RE = re.compile(r"^\s*code for (sm_\w+)")
RES_FUNC_RE = re.compile(r"^\s*Function\s+(\S+?):\s*$")
RES_KV_RE = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")


def parse_sass(text, kernels):
    """Fills kernels (dict name -> Kernel) from `cuobjdump -sass`; returns the archs seen."""
    archs = set()
    current = None
    for line in text.splitlines():
        m = ARCH_RE.match(line)
        if m:
            archs.add(m.group(1))
            continue
        m = FUNC_RE.match(line)
        if m:
            name = m.group(1)
            current = kernels.setdefault(name, Kernel(name))
            continue
        m = INSTR_RE.match(line)
        if m and current is not None:
            body = m.group(2).strip().strip("{}").strip()
            tokens = body.split()
            if tokens and tokens[0].startswith("@"):  # predicate guard: @P0, @!PT
                tokens = tokens[1:]
            if tokens:
                current.instructions.append((m.group(1), tokens[0].rstrip(";"), body))
    return archs


def parse_res_usage(text, kernels):
    current = None
    for line in text.splitlines():
        m = RES_FUNC_RE.match(line)
        if m:
            name = m.group(1)
            current = kernels.setdefault(name, Kernel(name))
            continue
        if current is not None and "REG:" in line:
            for key, value in RES_KV_RE.findall(line):
                current.resources[key] = int(value)
            current = None


def demangle(kernels):
    names = [k.name for k in kernels if k.name.startswith("_Z")]
    if not names:
        return
    for tool in ("c++filt", "cu++filt"):
        path = shutil.which(tool)
        if not path:
            continue
        try:
            proc = subprocess.run([path], input="\n".join(names) + "\n", stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, universal_newlines=True)
        except OSError:
            continue
        out = proc.stdout.splitlines()
        if proc.returncode == 0 and len(out) == len(names):
            table = dict(zip(names, out))
            for k in kernels:
                d = table.get(k.name, k.name)
                # Template instantiations demangle with their return type; kernels return void.
                k.demangled = d[len("void "):] if d.startswith("void ") else d
            return


def trim_padding(kernel):
    """Drops the trailing NOP alignment and the `BRA <self>` after the last EXIT."""
    ins = kernel.instructions
    while ins and split_opcode(ins[-1][1])[0] == "NOP":
        ins.pop()
    if ins and split_opcode(ins[-1][1])[0] == "BRA":
        target = BRA_TARGET_RE.search(ins[-1][2])
        if target and int(target.group(1), 16) == int(ins[-1][0], 16):
            ins.pop()


# --------------------------------------------------------------------------------------------
# Report


def print_table(kernels, checked_names):
    headers = ["kernel", "regs", "smem", "stack", "local"] + [h for h, _ in COUNT_COLUMNS] + \
              ["instrs", "audit"]
    patterns = [OpPattern(p) for _, p in COUNT_COLUMNS]
    rows = []
    for k in kernels:
        row = [k.demangled] + ["?" if k.res(r) is None else k.res(r)
                               for r in ("REG", "SHARED", "STACK", "LOCAL")]
        row += [k.count(p) for p in patterns]
        row += [len(k.instructions), checked_names.get(k.name, "-")]
        rows.append([str(c) for c in row])
        loop = k.main_loop()
        if loop:
            row = ["  main loop 0x%s..0x%s" % (loop[0][0], loop[-1][0]), "", "", "", ""]
            row += [sum(1 for _, op, _ in loop if p.matches(op)) for p in patterns]
            row += [len(loop), ""]
            rows.append([str(c) for c in row])
    widths = [max(len(r[i]) for r in rows + [headers]) for i in range(len(headers))]

    def fmt(r):
        cells = [r[0].ljust(widths[0])]
        cells += [c.rjust(w) for c, w in zip(r[1:-1], widths[1:-1])]
        cells.append(r[-1].ljust(widths[-1]))
        return "  ".join(cells).rstrip()

    print(fmt(headers))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(fmt(r))


def check(kernels, expectations, toolchain):
    """(violations, status per kernel name, the lines that applied to `toolchain`)."""
    violations = []
    status = {}
    applied = [e for e in expectations if e.applies_to_toolchain(toolchain)]
    if expectations and not applied:
        violations.append("no vxqa-audit line applies to toolchain %s (of %d lines): the run "
                          "would check nothing" % (toolchain, len(expectations)))
    covered = set()
    for exp in applied:
        matched = [k for k in kernels if exp.applies_to(k)]
        if not matched:
            violations.append("%s: kernel=%s matches no kernel in the cubin (kernels: %s)"
                              % (exp.where, exp.kernel_re.pattern,
                                 ", ".join(k.demangled for k in kernels) or "none"))
            continue
        for k in matched:
            covered.add(k.name)
            before = len(violations)
            who = "kernel %s" % k.demangled
            missing = [r for r in RESOURCE_KEYS if k.res(r) is None]
            if missing:
                violations.append("%s: cuobjdump -res-usage printed no %s for it (missing "
                                  "resource data is a failure, not 0) [%s]"
                                  % (who, ", ".join(missing), exp.where))
            if not k.instructions:
                violations.append("%s: no SASS instruction parsed for it [%s]" % (who, exp.where))
            stack, local = k.res("STACK"), k.res("LOCAL")
            if stack is not None and stack > exp.max_stack:
                violations.append("%s spills: %d bytes stack frame (allowed %d; register spills "
                                  "or a local array) [%s]" % (who, stack, exp.max_stack, exp.where))
            if local is not None and local > exp.max_local:
                violations.append("%s uses local memory: %d bytes per thread (allowed %d) [%s]"
                                  % (who, local, exp.max_local, exp.where))
            regs, shared = k.res("REG"), k.res("SHARED")
            if exp.max_registers is not None and regs is not None and regs > exp.max_registers:
                violations.append("%s uses %d registers (max-registers=%d) [%s]"
                                  % (who, regs, exp.max_registers, exp.where))
            if exp.max_shared is not None and shared is not None and shared > exp.max_shared:
                violations.append("%s uses %d bytes static shared memory (max-shared=%d) [%s]"
                                  % (who, shared, exp.max_shared, exp.where))
            if exp.max_instructions is not None and len(k.instructions) > exp.max_instructions:
                violations.append("%s has %d SASS instructions (max-instructions=%d) [%s]"
                                  % (who, len(k.instructions), exp.max_instructions, exp.where))
            for p in exp.require:
                if k.count(p) == 0:
                    violations.append("%s: required %s not found in its SASS [%s]"
                                      % (who, p.text, exp.where))
            if exp.loop_require:
                loop = k.main_loop()
                if loop is None:
                    violations.append("%s: no main loop found (no backward branch around an "
                                      "HMMA), so loop-require=%s cannot hold [%s]"
                                      % (who, ",".join(p.text for p in exp.loop_require),
                                         exp.where))
                else:
                    for p in exp.loop_require:
                        if not any(p.matches(op) for _, op, _ in loop):
                            violations.append("%s: required %s not found in its main loop "
                                              "0x%s..0x%s (%d elsewhere in the kernel) [%s]"
                                              % (who, p.text, loop[0][0], loop[-1][0],
                                                 k.count(p), exp.where))
            for p in exp.forbid:
                n = k.count(p)
                if n:
                    violations.append("%s: forbidden %s appears %d time%s, e.g. %s [%s]"
                                      % (who, p.text, n, "" if n == 1 else "s",
                                         "; ".join(k.examples(p)), exp.where))
            failed = len(violations) > before
            if failed or status.get(k.name) != "FAIL":
                status[k.name] = "FAIL" if failed else "ok"
    for k in kernels:
        if k.name not in covered:
            violations.append("kernel %s: no vxqa-audit line that applies to toolchain %s covers "
                              "it" % (k.demangled, toolchain))
    return violations, status, applied


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Audit the SASS of a cubin against `// vxqa-audit:` lines in its source.")
    ap.add_argument("cubin")
    ap.add_argument("--source", action="append", default=[],
                    help="source file holding vxqa-audit lines (repeatable; at least one)")
    ap.add_argument("--cuobjdump", help="cuobjdump to use (default: CUDA 11.8's)")
    ap.add_argument("--expect-arch", help="fail unless the cubin's code is for this sm_XX")
    ap.add_argument("--toolchain", help="name of the compiler that built CUBIN (for toolchain=)")
    args = ap.parse_args(argv)

    try:
        if not os.path.isfile(args.cubin):
            raise UsageError("cubin %s does not exist (build the target that makes it, e.g. "
                             "`cmake --build BUILD --target vxqa_sm70`)" % args.cubin)
        if not args.source:
            raise UsageError("no --source: without vxqa-audit lines the audit would check "
                             "nothing")
        expectations = read_expectations(args.source)
        if not expectations:
            raise UsageError("no `// vxqa-audit:` line in %s; an audit TU must state what it "
                             "expects" % ", ".join(args.source))
        if args.toolchain is not None and args.toolchain not in KNOWN_TOOLCHAINS:
            raise UsageError("unknown --toolchain %s (known: %s)"
                             % (args.toolchain, ", ".join(KNOWN_TOOLCHAINS)))
        gated = [e.where for e in expectations if e.toolchain_re is not None]
        if gated and args.toolchain is None:
            raise UsageError("%s gate%s on toolchain= but no --toolchain was given: whether "
                             "%s would be a guess" % (", ".join(gated),
                                                      "s" if len(gated) == 1 else "",
                                                      "it applies" if len(gated) == 1
                                                      else "they apply"))
        cuobjdump = find_cuobjdump(args.cuobjdump)
        release = tool_release(cuobjdump)
        kernels = {}
        parse_res_usage(run_tool([cuobjdump, "-res-usage", args.cubin]), kernels)
        archs = parse_sass(run_tool([cuobjdump, "-sass", args.cubin]), kernels)
    except UsageError as e:
        print("sass_audit: error: %s" % e, file=sys.stderr)
        return 2

    kernel_list = list(kernels.values())
    for k in kernel_list:
        trim_padding(k)
    demangle(kernel_list)
    kernel_list.sort(key=lambda k: k.demangled)

    print("sass_audit: %s (%s; %s)%s" % (shown_path(args.cubin),
                                         ", ".join(sorted(archs)) or "arch ?", release,
                                         " [%s]" % args.toolchain if args.toolchain else ""))
    violations = []
    if args.expect_arch and archs != {args.expect_arch}:
        violations.append("cubin holds code for %s, expected %s only"
                          % (", ".join(sorted(archs)) or "no architecture", args.expect_arch))
    if not kernel_list:
        violations.append("no kernel in %s" % shown_path(args.cubin))
    more, status, applied = check(kernel_list, expectations, args.toolchain or "")
    violations += more

    if kernel_list:
        print_table(kernel_list, status)
    if violations:
        print("\nsass_audit: %d violation%s:" % (len(violations),
                                                  "" if len(violations) == 1 else "s"))
        for v in violations:
            print("  FAIL: %s" % v)
        return 1
    others = len(expectations) - len(applied)
    print("sass_audit: %d kernel%s, %d checked against %d vxqa-audit line%s%s: OK"
          % (len(kernel_list), "" if len(kernel_list) == 1 else "s", len(status),
             len(applied), "" if len(applied) == 1 else "s",
             " (%d more for other toolchains)" % others if others else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
