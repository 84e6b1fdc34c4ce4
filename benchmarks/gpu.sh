#!/usr/bin/env bash
# The embedded engine on a CUDA GPU: its GPU tests, the prefix-cache microbenchmark and the full
# agentwarm bench, with the local engine on CUDA in bfloat16.
#
#   bash benchmarks/gpu.sh            # from anywhere; runs in the repository root
#   OUT=results/ bash benchmarks/gpu.sh
#
# 1. python -m pytest -m gpu tests/engines -q       (LocalEngine on CUDA: exactness, prefetch)
# 2. python -m benchmarks.engine_bench --device cuda --dtype bfloat16 --model small
# 3. agentwarm bench --profile full --engine local --model 1b --device cuda --dtype bfloat16 --json
#    (the `1b` preset if this checkout has it, else `small`).
# AGENTWARM_DEVICE=cuda and AGENTWARM_DTYPE are exported too, for any local engine built without
# the options.
#
# stdout: one JSON object {"device", "torch", "tests", "engine_bench", "bench"}; the same in
# $OUT/gpu.json when OUT is set, with each step's own output beside it. Progress and the test
# log go to stderr. Exits 1 at once, with the reason, when there is no usable CUDA GPU; else 1
# when a step failed (the later steps still run), 0 when all passed.
#
# Environment: PYTHON (default python), AGENTWARM_DTYPE (default bfloat16), BENCH_MODEL (default
# 1b or small), BENCH_ARGS (extra `agentwarm bench` options, e.g. "--episodes 2"),
# ENGINE_BENCH_ARGS (extra engine_bench options, e.g. "--prefix 2048 8192").
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-python}
say() { printf 'gpu.sh: %s\n' "$*" >&2; }

# ---- no GPU: stop before anything runs
if ! probe=$("$PYTHON" -c '
import sys, torch
if not torch.cuda.is_available():
    build = "a CPU-only build" if torch.version.cuda is None else "CUDA " + torch.version.cuda
    sys.exit(f"torch {torch.__version__} ({build}): torch.cuda.is_available() is false")
p = torch.cuda.get_device_properties(0)
print(f"{p.name}, {p.total_memory / 2**30:.0f} GiB")
' 2>&1); then
    command -v nvidia-smi >/dev/null 2>&1 || probe="$probe; no nvidia-smi on PATH (no NVIDIA driver)"
    say "no usable CUDA GPU, nothing run: $probe. Run this on a machine with an NVIDIA GPU" \
        "and a CUDA build of torch."
    exit 1
fi
say "GPU: $probe"

export AGENTWARM_DEVICE=cuda
export AGENTWARM_DTYPE=${AGENTWARM_DTYPE:-bfloat16}
WORK=${OUT:-$(mktemp -d)}
mkdir -p "$WORK" || exit 1
failed=0

if [ -z "${BENCH_MODEL:-}" ]; then
    if "$PYTHON" -c 'import sys; from agentwarm.engines.local.model import PRESETS; sys.exit("1b" not in PRESETS)'; then
        BENCH_MODEL=1b
    else
        BENCH_MODEL=small
        say "preset 1b not in this checkout: the bench uses small"
    fi
fi

# ---- 1. the engine's GPU tests
say "1/3 python -m pytest -m gpu tests/engines -q"
"$PYTHON" -m pytest -m gpu tests/engines -q -p no:cacheprovider >"$WORK/pytest.txt" 2>&1
tests_rc=$?
cat "$WORK/pytest.txt" >&2
[ "$tests_rc" -eq 0 ] || { failed=1; say "GPU tests failed (exit $tests_rc)"; }
tests_summary=$(tail -n 1 "$WORK/pytest.txt")

# ---- 2. prefix-cache microbenchmark
say "2/3 python -m benchmarks.engine_bench --device cuda --dtype $AGENTWARM_DTYPE --model small"
# shellcheck disable=SC2086  # ENGINE_BENCH_ARGS is a list of options
if ! "$PYTHON" -m benchmarks.engine_bench --device cuda --dtype "$AGENTWARM_DTYPE" --model small \
    --json "$WORK/engine_bench.json" ${ENGINE_BENCH_ARGS:-} >&2; then
    failed=1
    say "engine_bench failed"
    echo null >"$WORK/engine_bench.json"
fi

# ---- 3. the full bench on the 1B-class preset
bench=(bench --profile full --engine local --model "$BENCH_MODEL" --device cuda
    --dtype "$AGENTWARM_DTYPE" --json)
say "3/3 agentwarm ${bench[*]} ${BENCH_ARGS:-}"
# shellcheck disable=SC2086  # BENCH_ARGS is a list of options
if ! "$PYTHON" -m agentwarm.cli "${bench[@]}" ${BENCH_ARGS:-} >"$WORK/bench.json"; then
    failed=1
    say "agentwarm bench failed"
    [ -s "$WORK/bench.json" ] || echo null >"$WORK/bench.json"
fi

# ---- one JSON object on stdout (and in $OUT/gpu.json)
"$PYTHON" - "$WORK" "$probe" "$tests_rc" "$tests_summary" "$BENCH_MODEL" <<'EOF' | tee "$WORK/gpu.json"
import json, sys, torch
work, device, rc, summary, model = sys.argv[1:]

def load(name):
    try:
        with open(f"{work}/{name}", encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}

print(json.dumps({
    "device": device,
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "tests": {"exit_code": int(rc), "summary": summary},
    "engine_bench": load("engine_bench.json"),
    "bench": {"model": model, "report": load("bench.json")},
}, indent=2))
EOF
[ -n "${OUT:-}" ] || rm -rf "$WORK"
exit "$failed"
