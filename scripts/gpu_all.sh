#!/usr/bin/env bash
# Everything a GPU machine checks, in one call (the H200 lease is short): builds the GPU
# targets for the local GPU, then runs, each writing its raw, untrimmed log to $OUT:
#   gpu-suite.log / gpu-suite_sm70.log   the GPU tests, default atom / SM70 path forced
#   example.log demo.log                 the C++ examples (steps "suite" and "examples")
#   sweep.log sweep-fresh.log            vxqa_sweep over seeds [0, SWEEP_SEEDS), then as many of a fresh
#                                        seed base (step "sweep"; "sweep_fixed" and "sweep_fresh" run one)
#   memcheck.log racecheck.log synccheck.log (and *_sm70.log)   compute-sanitizer on the reduced matrix
#                                        (and memcheck on the poisoned block tables)
#   bench.json bench.log                 the decode benchmark
#   host-cost.json host-cost.log         a decode() call's host time and the opt-in's share (step "hostcost")
#   variants.json variants.log           the attention variants against plain attention (step "variants")
#   queries.json queries.log             several query tokens a sequence, G 12 against G 6 (step "queries")
#   formats.json formats.log             an E4M3 cache (hardware cvt, software decode) against E5M2 (step "formats")
#   wgmma-rows.log                       the warpgroup-MMA prototype of a multi-token body (step "wgmma", sm_90)
#   stream-tail.log stream-tail-claims.log  static chunks against units from a counter, and a step's partials
#                                        merged three ways, bytes alone; the dynamic kernel's ablations (step "streamtail")
#   wide-ctas.json wide-ctas.log         one 8-warp CTA an SM against two 4-warp ones, every shape (step "widectas")
#   merges.log                           a step's partials merged five ways (a thread-block cluster's among
#                                        them), bytes alone (step "merges", sm_90)
#   raceprobe-*.log                      racecheck's hazards in the SM70 body's D 512 launches, case by case and
#                                        with launches serialised, and in the same pattern alone
#                                        (bench/racecheck_probe.cu; step "raceprobe")
#   dims-split.log                       the multi-token prototype whose warps split the head dims (step "dimssplit")
#   experiment.json experiment.log       the benchmark over chunk sizes, warps and stages (step
#                                        "experiment"); plans.json plans.log, every shape's default
#                                        plan against the rule it replaced ("plans"); ramp.json
#                                        ramp.log, one wave of one-chunk CTAs over chunk lengths ("ramp");
#                                        ncu.log, ncu-source.log the seed shape's
#                                        kernels profiled ("ncu"); contexts.json ("contexts");
#                                        breakdown.log, parts of a step timed alone ("breakdown");
#                                        timeline.json timeline.log, each CTA's stamps ("timeline")
#   peer*.json peer.log                  FlashInfer on the same shapes, formats.json's too (step "peer": needs
#                                        its wheels in .peers/, see ../shared/peers/README.md)
#   torch-build.log torch-pytest.log torch-example.log   the torch package built for this GPU,
#                                        its pytest suite and example (step "torch":
#                                        scripts/torch_test.sh with python3); torch-host.json
#                                        torch-host.log, an eager call's host cost: plain op,
#                                        DecodePlan, FlashInfer if carried (bench/torch_host_overhead.py)
# Steps run in the order VXQA_STEPS names them (default "build suite sweep torch bench hostcost
# sanitize": every GPU test binary and tag runs, the torch tests included); steps joined by "+"
# run side by side (e.g. "suite+sweep_fixed": the checks share the GPU, each writes its own log;
# never a benchmark beside anything);
# VXQA_PREBUILT: an archive of build-gpu's binaries made off the machine (scripts/gpu_pack.sh),
# which step "build" unpacks instead of building (a device call's minutes go to running);
# VXQA_SUITES: which GPU suites step "suite" runs ("default sm70"); SANITIZE_TOOLS: which tools
# step "sanitize" runs on both ("memcheck racecheck synccheck"; racecheck's known false positive,
# scripts/racecheck_known.py, does not fail it, any other hazard does).
# VXQA_TARGETS: what step "build" builds (default: everything the steps use).
# VXQA_DEADLINE (seconds from the start) stops starting sanitizer runs past it. The summary
# of every step is printed last; the logs end up in $OUT/logs.tar.gz. CATCH2_PREFIX: a Catch2
# v2 install if the machine has none.
# Exit status: 0 only when every step ran and passed; 1 when any failed (a non-zero rc: a
# failed test, a crash, a timeout, a suite that skipped, a step that does not exist; the
# last summary line names them); 3 when none failed but some were not run (deadline). Each
# step reports through note "NAME: rc N, ..." (N not 0 marks NAME failed) or
# note "NAME: not run (why)"; a failed build still writes the summary and the archive.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/build-gpu/out}"
mkdir -p "$out"
steps="${VXQA_STEPS:-build suite sweep torch bench hostcost sanitize}"
deadline=$((SECONDS + ${VXQA_DEADLINE:-100000}))  # sanitizer runs stop starting past it
seeds="${SWEEP_SEEDS:-10000}"
commit="${VXQA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
summary=()
failed=()   # "NAME (rc N)" of every failed step or part of one
not_run=()  # NAME of every part not run (deadline)
note() {  # note "NAME: rc N, ...": a summary line; N not 0 marks NAME failed
  summary+=("$1")
  if [[ $1 =~ ^([^:]+):\ rc\ ([0-9]+) ]]; then
    [ "${BASH_REMATCH[2]}" = 0 ] || failed+=("${BASH_REMATCH[1]} (rc ${BASH_REMATCH[2]})")
  elif [[ $1 =~ ^([^:]+):\ not\ run ]]; then
    not_run+=("${BASH_REMATCH[1]}")
  fi
}

finish() {  # the logs archive, the summary, what failed or did not run; exits
  # The device tool returns at most 8 files: every log goes back in one archive.
  (cd "$out" && shopt -s nullglob && logs=(./*.log) && if [ ${#logs[@]} -gt 0 ]; then
     tar czf logs.tar.gz "${logs[@]}" && rm -f "${logs[@]}"; fi) ||
    failed+=("logs archive (rc $?)")
  echo "== gpu_all at $commit on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  printf '%s\n' "${summary[@]}"
  if [ ${#failed[@]} -gt 0 ]; then
    echo "== gpu_all: FAILED: $(printf '%s, ' "${failed[@]}" | sed 's/, $//')${not_run[*]:+; not run: ${not_run[*]}}"
    exit 1
  elif [ ${#not_run[@]} -gt 0 ]; then
    echo "== gpu_all: no failure, but not run: ${not_run[*]} (not a pass)"
    exit 3
  fi
  echo "== gpu_all: every step passed ($steps)"
  exit 0
}

# The local GPU's architecture, with sm_90's "a" features (the warpgroup MMA: test [wgmma]).
gpu_arch() {
  local cap
  cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')"
  if [ "$cap" = 90 ]; then echo 90a; else echo native; fi
}

step_build() {
  start=$SECONDS
  if [ -n "${VXQA_PREBUILT:-}" ]; then
    tar xJf "$VXQA_PREBUILT" >"$out/build.log" 2>&1
    rc=$?
    note "build: rc $rc, $((SECONDS - start)) s, unpacked $VXQA_PREBUILT ($(tar tJf "$VXQA_PREBUILT" 2>/dev/null | wc -l) files)"
    [ $rc -ne 0 ] && finish
    return
  fi
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${VXQA_GPU_ARCH:-$(gpu_arch)}" \
    -DVXQA_SM70_AUDIT=OFF ${CATCH2_PREFIX:+-DCMAKE_PREFIX_PATH=$CATCH2_PREFIX} >"$out/configure.log" 2>&1 &&
    cmake --build build-gpu -j "$(nproc)" --target ${VXQA_TARGETS:-vxqa_gpu_tests vxqa_gpu_tests_sm70 vxqa_sweep \
      vxqa_decode_bench vxqa_cta_timeline vxqa_host_cost vxqa_demo vxqa_custom_config vxqa_wgmma_rows vxqa_stream_tail vxqa_dims_split_rows \
      vxqa_racecheck_probe} >"$out/build.log" 2>&1
  rc=$?
  note "build: rc $rc, $((SECONDS - start)) s"
  if [ $rc -ne 0 ]; then grep -sE "error" "$out/build.log" "$out/configure.log" | head -30; finish; fi
}

step_examples() {  # the C++ examples (step "suite" runs them too)
  ./build-gpu/examples/vxqa_custom_config >"$out/example.log" 2>&1
  note "example custom_config: rc $?: $(tail -1 "$out/example.log")"
  ./build-gpu/examples/vxqa_demo >"$out/demo.log" 2>&1
  note "example decode_demo: rc $?: $(grep -E '^check vs|us per step' "$out/demo.log" | tr '\n' ' ')"
}

step_suite() {  # both variants at once: they share the GPU, each checks its own results
  start=$SECONDS
  suffix() { [ "$1" = sm70 ] && echo _sm70; }  # the binary's suffix of a suite name
  local pids=() rcs=() i=0
  for s in ${VXQA_SUITES:-default sm70}; do
    v=$(suffix "$s")
    ./build-gpu/test/vxqa_gpu_tests$v >"$out/gpu-suite$v.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; rcs+=($?); done  # each suite's own exit status
  step_examples
  for s in ${VXQA_SUITES:-default sm70}; do
    v=$(suffix "$s")
    note "suite$v: rc ${rcs[i]}, $((SECONDS - start)) s: $(grep -sE '^(All tests passed|test cases:|SKIPPED)' "$out/gpu-suite$v.log" | tr '\n' ' ')"
    i=$((i + 1))
  done
}

step_sweep() {  # the fixed seeds, then the fresh ones (each is a step of its own too)
  step_sweep_fixed
  step_sweep_fresh
}

step_sweep_fixed() {  # the fixed seeds [SWEEP_SEED_BEGIN (default 0), SWEEP_SEEDS) (sweep.log): a range
  # split over two calls covers them all where one call's limit would cut the run short
  start=$SECONDS
  ./build-gpu/test/sweep/vxqa_sweep --seed-base 0 --seed-begin "${SWEEP_SEED_BEGIN:-0}" --seed-end "$seeds" \
    >"$out/sweep.log" 2>&1
  note "sweep: rc $?, $((SECONDS - start)) s: $(tail -1 "$out/sweep.log")"
}

step_sweep_fresh() {  # SWEEP_FRESH_SEEDS (default SWEEP_SEEDS) cases of a fresh seed base (SWEEP_SEED_BASE,
  # default the time: cases no run has drawn; sweep-fresh.log, whose header and failure lines
  # name the base that replays them)
  start=$SECONDS
  local base="${SWEEP_SEED_BASE:-$(date +%s)}" fresh="${SWEEP_FRESH_SEEDS:-$seeds}"
  ./build-gpu/test/sweep/vxqa_sweep --seed-base "$base" --seed-begin 0 --seed-end "$fresh" >"$out/sweep-fresh.log" 2>&1
  note "sweep-fresh: rc $?, $((SECONDS - start)) s, seed base $base: $(tail -1 "$out/sweep-fresh.log")"
}

step_sanitize() {  # SANITIZE_TOOLS: which tools (default all three), each on both suites
  for v in "" _sm70; do
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
      start=$SECONDS
      filter="[sanitize_reduced]"
      [ $tool = memcheck ] && filter="[sanitize_reduced],[sanitize_pages]"
      left=$((deadline - SECONDS))
      [ $left -lt 20 ] && { note "$tool$v: not run (deadline)"; continue; }
      [ $left -gt "${SANITIZE_TIMEOUT:-150}" ] && left=${SANITIZE_TIMEOUT:-150}
      # racecheck lists every hazard, so that racecheck_known.py can tell its known false
      # positive (the SM70 body's D 512 merge, docs/performance.md) from anything else.
      extra=""
      [ $tool = racecheck ] && extra="--racecheck-report hazard --print-limit 100000"
      timeout "$left" compute-sanitizer --tool $tool $extra --error-exitcode 9 \
        ./build-gpu/test/vxqa_gpu_tests$v "$filter" >"$out/$tool$v.log" 2>&1
      rc=$?
      known=""
      if [ $tool = racecheck ] && [ $rc = 9 ] && grep -q "All tests passed" "$out/$tool$v.log"; then
        known="$(python3 scripts/racecheck_known.py "$out/$tool$v.log")" && rc=0
        known=" ($known)"
      fi
      note "$tool$v: rc $rc, $((SECONDS - start)) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool$v.log" | tail -1)$known"
    done
  done
}

step_raceprobe() {  # the SM70 body's D 512 racecheck hazards (docs/performance.md, "a racecheck finding"): what they follow
  local bin=./build-gpu/test/vxqa_gpu_tests_sm70 d512="reduced matrix: D512 E5M2" d64="reduced matrix: D64 fp16"
  probe() {  # probe NAME ENV FILTER: racecheck's hazards, each with its threads and address
    local start=$SECONDS
    env $2 timeout 120 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 $bin "$3" \
      >"$out/raceprobe-$1.log" 2>&1
    note "raceprobe $1: rc $?, $((SECONDS - start)) s: $(grep -E 'RACECHECK SUMMARY' "$out/raceprobe-$1.log" | tail -1)"
  }
  probe all X=1 "[sanitize_reduced]"
  probe all-blocking CUDA_LAUNCH_BLOCKING=1 "[sanitize_reduced]"
  probe d512-alone X=1 "$d512"
  probe d64-then-d512 X=1 "$d64,$d512"
  probe d512-then-d64 X=1 "$d512,$d64"
  # The same pattern, race-free by construction, in a kernel of its own (bench/racecheck_probe.cu).
  local start=$SECONDS
  timeout 120 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 \
    ./build-gpu/bench/vxqa_racecheck_probe >"$out/raceprobe-pattern.log" 2>&1
  note "raceprobe pattern: rc $?, $((SECONDS - start)) s: $(grep -E 'RACECHECK SUMMARY' "$out/raceprobe-pattern.log" | tail -1)"
}

step_merges() {  # a step's partials merged five ways, the cluster's among them, bytes alone (bench/stream_tail.cu --merges)
  start=$SECONDS
  ./build-gpu/bench/vxqa_stream_tail --merges >"$out/merges.log" 2>&1
  note "merges: rc $?, $((SECONDS - start)) s"
  cat "$out/merges.log"
}

step_bench() {
  start=$SECONDS
  ./build-gpu/bench/vxqa_decode_bench --json "$out/bench.json" --commit "$commit" >"$out/bench.log" 2>&1
  note "bench: rc $?, $((SECONDS - start)) s"
  cat "$out/bench.log"
}

step_hostcost() {  # what a decode() call costs the host, and the shared-memory opt-in's share of it
  ./build-gpu/bench/vxqa_host_cost --json "$out/host-cost.json" --commit "$commit" >"$out/host-cost.log" 2>&1
  note "hostcost: rc $?: $(tail -1 "$out/host-cost.log")"
}

step_experiment() {
  start=$SECONDS
  ./build-gpu/bench/vxqa_decode_bench --experiment --json "$out/experiment.json" --commit "$commit" >"$out/experiment.log" 2>&1
  note "experiment: rc $?, $((SECONDS - start)) s"
  cat "$out/experiment.log"
}

step_variants() {  # the attention variants against plain attention (bench --variants)
  start=$SECONDS
  ./build-gpu/bench/vxqa_decode_bench --variants --json "$out/variants.json" --commit "$commit" >"$out/variants.log" 2>&1
  note "variants: rc $?, $((SECONDS - start)) s"
  cat "$out/variants.log"
}

step_queries() {  # several query tokens a sequence, and G 12 against G 6 (bench --queries)
  start=$SECONDS
  ./build-gpu/bench/vxqa_decode_bench --queries --json "$out/queries.json" --commit "$commit" >"$out/queries.log" 2>&1
  note "queries: rc $?, $((SECONDS - start)) s"
  cat "$out/queries.log"
}

step_streamtail() {  # static chunks against units from a counter, and merges, the seed shape's bytes alone (bench/stream_tail.cu)
  start=$SECONDS
  ./build-gpu/bench/vxqa_stream_tail >"$out/stream-tail.log" 2>&1
  note "stream_tail: rc $?, $((SECONDS - start)) s"
  ./build-gpu/bench/vxqa_stream_tail --claims >"$out/stream-tail-claims.log" 2>&1
  note "stream_tail --claims: rc $?, $((SECONDS - start)) s"
  cat "$out/stream-tail.log" "$out/stream-tail-claims.log"
}

step_dimssplit() {  # the multi-token prototype whose warps split the head dims (bench/dims_split_rows.cu)
  start=$SECONDS
  ./build-gpu/bench/vxqa_dims_split_rows >"$out/dims-split.log" 2>&1
  note "dims_split: rc $?, $((SECONDS - start)) s"
  cat "$out/dims-split.log"
}

step_wgmma() {  # the warpgroup-MMA prototype of a multi-token body (bench/wgmma_rows.cu; sm_90 only)
  start=$SECONDS
  ./build-gpu/bench/vxqa_wgmma_rows >"$out/wgmma-rows.log" 2>&1
  note "wgmma: rc $?, $((SECONDS - start)) s"
  cat "$out/wgmma-rows.log"
}

step_formats() {  # E4M3 (hardware and software decode) against E5M2 (bench --formats)
  start=$SECONDS
  ./build-gpu/bench/vxqa_decode_bench --formats --json "$out/formats.json" --commit "$commit" >"$out/formats.log" 2>&1
  note "formats: rc $?, $((SECONDS - start)) s"
  cat "$out/formats.log"
}

step_widectas() {  # one 8-warp CTA an SM against two 4-warp ones (bench --wide-ctas): the cluster merge's plan
  start=$SECONDS
  ./build-gpu/bench/vxqa_decode_bench --wide-ctas --json "$out/wide-ctas.json" --commit "$commit" >"$out/wide-ctas.log" 2>&1
  note "widectas: rc $?, $((SECONDS - start)) s"
  cat "$out/wide-ctas.log"
}

step_plans() {  # each shape's default plan against the rule it replaced
  start=$SECONDS
  ./build-gpu/bench/vxqa_decode_bench --plans --json "$out/plans.json" --commit "$commit" >"$out/plans.log" 2>&1
  note "plans: rc $?, $((SECONDS - start)) s"
  cat "$out/plans.log"
}

step_ramp() {  # one wave of one-chunk CTAs over chunk lengths: the fixed cost of a CTA and of the combine
  start=$SECONDS
  ./build-gpu/bench/vxqa_decode_bench --ramp --json "$out/ramp.json" --commit "$commit" >"$out/ramp.log" 2>&1
  note "ramp: rc $?, $((SECONDS - start)) s"
  cat "$out/ramp.log"
}

step_timeline() {  # each CTA's stamps in one replay of back-to-back steps (bench/cta_timeline.cu)
  start=$SECONDS
  ./build-gpu/bench/vxqa_cta_timeline --json "$out/timeline.json" --commit "$commit" >"$out/timeline.log" 2>&1
  note "timeline: rc $?, $((SECONDS - start)) s"
  grep -E "^##|^summary" "$out/timeline.log"
}

step_breakdown() {  # graph replays of parts of a step: where the fixed costs lie
  start=$SECONDS
  ./build-gpu/bench/vxqa_decode_bench --breakdown --commit "$commit" >"$out/breakdown.log" 2>&1
  note "breakdown: rc $?, $((SECONDS - start)) s"
  grep -E "^breakdown|copy bandwidth" "$out/breakdown.log"
}

step_ncu() {  # decode and combine of the seed shape and of B16 x 1K: every section, and stalls per SASS line
  for shape in ${VXQA_NCU_SHAPES:-0 3}; do
    start=$SECONDS
    [ $((deadline - SECONDS)) -lt 40 ] && { note "ncu shape $shape: not run (deadline)"; continue; }
    timeout 200 ncu --clock-control none --set full --import-source no -f -o "$out/profile$shape" \
      --kernel-name regex:"decode_kernel|combine_kernel" --launch-skip 40 --launch-count 2 \
      ./build-gpu/bench/vxqa_decode_bench --profile --shape $shape >"$out/ncu-run$shape.log" 2>&1
    note "ncu shape $shape: rc $?, $((SECONDS - start)) s"
    ncu -i "$out/profile$shape.ncu-rep" --page details >"$out/ncu$shape.log" 2>&1
    ncu -i "$out/profile$shape.ncu-rep" --page source --csv --print-source sass >"$out/ncu-source$shape.log" 2>&1
    rm -f "$out/profile$shape.ncu-rep"
    grep -E "^  [a-z_]+<|DRAM Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Issued Warp|No Eligible|Eligible Warps|Registers Per|Waves" "$out/ncu$shape.log" | head -40
  done
}

step_contexts() {  # % of copy against context length (and FlashInfer on the same lengths, if carried)
  start=$SECONDS
  left=$((deadline - SECONDS))
  [ $left -lt 30 ] && { note "contexts: not run (deadline)"; return; }
  timeout "$left" ./build-gpu/bench/vxqa_decode_bench --contexts --json "$out/contexts.json" --commit "$commit" \
    >"$out/contexts.log" 2>&1
  note "contexts: rc $?, $((SECONDS - start)) s"
  cat "$out/contexts.log"
}

step_peer() {
  start=$SECONDS
  [ $((deadline + 60 - SECONDS)) -lt 40 ] && { note "peer: not run (deadline)"; return; }
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .peers/*.whl >"$out/peer.log" 2>&1
  if [ -f "$out/bench.json" ]; then
    PYTHONPATH=/tmp/site python3 bench/flashinfer_peer.py "$out/bench.json" "$out/peer.json" >>"$out/peer.log" 2>&1
    note "peer: rc $?, $((SECONDS - start)) s"
  fi
  if [ -f "$out/contexts.json" ]; then
    PYTHONPATH=/tmp/site python3 bench/flashinfer_peer.py "$out/contexts.json" "$out/peer-contexts.json" \
      --tensor-cores-only >>"$out/peer.log" 2>&1
    note "peer on contexts: rc $?, $((SECONDS - start)) s"
  fi
  if [ -f "$out/queries.json" ]; then  # its prebuilt paged prefill, causal, for q_len > 1
    PYTHONPATH=/tmp/site python3 bench/flashinfer_peer.py "$out/queries.json" "$out/peer-queries.json" \
      --queries >>"$out/peer.log" 2>&1
    note "peer on queries: rc $?, $((SECONDS - start)) s"
  fi
  if [ -f "$out/variants.json" ]; then  # FlashInfer JIT-compiles its windowed and soft-capped modules here
    left=$((deadline + 60 - SECONDS))
    timeout "$left" env PYTHONPATH=/tmp/site python3 bench/flashinfer_peer.py "$out/variants.json" \
      "$out/peer-variants.json" --variants >>"$out/peer.log" 2>&1
    note "peer on variants: rc $?, $((SECONDS - start)) s"
  fi
  if [ -f "$out/formats.json" ]; then  # E4M3, bf16 caches and D 512: JIT-compiled here
    left=$((deadline + 60 - SECONDS))
    timeout "$left" env PYTHONPATH=/tmp/site python3 bench/flashinfer_peer.py "$out/formats.json" \
      "$out/peer-formats.json" --formats >>"$out/peer.log" 2>&1
    note "peer on formats: rc $?, $((SECONDS - start)) s"
  fi
  [ -f "$out/bench.json" ] || [ -f "$out/contexts.json" ] || [ -f "$out/variants.json" ] ||
    [ -f "$out/queries.json" ] || [ -f "$out/formats.json" ] ||
    note "peer: not run (no bench.json, contexts.json, variants.json, queries.json nor formats.json)"
  cat "$out/peer.log"
}

step_torch() {
  start=$SECONDS
  OUT="$out" PYTHON="${PYTHON:-python3}" bash scripts/torch_test.sh >"$out/torch.log" 2>&1
  rc=$?
  note "torch: rc $rc, $((SECONDS - start)) s: $(grep -sE '^=+ .*(passed|failed|skipped|error)' "$out/torch-pytest.log" | tr '\n' ' '); $(grep -sE '^torch_gqa_layer: (passed|FAILED|no CUDA)' "$out/torch-example.log")"
  cat "$out/torch.log"
  # The host cost of an eager call, with the package just installed (even if a test failed;
  # FlashInfer's row needs its wheels in .peers/: ../shared/peers/README.md).
  if grep -q "^torch: built and installed" "$out/torch.log"; then
    start=$SECONDS
    site=""
    if ls .peers/*.whl >/dev/null 2>&1 &&
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .peers/*.whl >"$out/torch-host.log" 2>&1; then
      site=/tmp/site
    fi
    PYTHONPATH="$site" "${PYTHON:-python3}" bench/torch_host_overhead.py "$out/torch-host.json" --commit "$commit" \
      >>"$out/torch-host.log" 2>&1
    note "torch host overhead: rc $?, $((SECONDS - start)) s"
    cat "$out/torch-host.log"
  fi
}

run_step() {
  if ! declare -F "step_$1" >/dev/null; then note "$1: rc 127, no such step"; return; fi
  "step_$1"
}

# A group "a+b": each step in a subshell of its own, side by side; their summary lines are
# noted here, in the group's order, once all of them have ended.
run_group() {
  local parts i pids=()
  IFS=+ read -ra parts <<<"$1"
  for i in "${!parts[@]}"; do
    (summary=()
      run_step "${parts[i]}" >"$out/.group$i.out" 2>&1
      printf '%s\n' "${summary[@]}" >"$out/.group$i.notes") &
    pids+=($!)
  done
  for i in "${!parts[@]}"; do
    wait "${pids[i]}"
    cat "$out/.group$i.out"
    if [ -f "$out/.group$i.notes" ]; then
      while IFS= read -r line; do [ -n "$line" ] && note "$line"; done <"$out/.group$i.notes"
    else
      note "${parts[i]}: rc 1, its subshell ended without a summary (a step that calls finish fails its group)"
    fi
    rm -f "$out/.group$i.out" "$out/.group$i.notes"
  done
}

for step in $steps; do
  if [[ $step == *+* ]]; then run_group "$step"; else run_step "$step"; fi
done
finish
