#!/usr/bin/env bash
# One-step, idempotent set-up of meshop into ./.venv (git-ignored).
#  - creates the virtual environment if it is missing;
#  - installs torch 2.13.0 only when the environment has no torch (a user's own torch is kept);
#  - builds torch-cluster from source with ninja and --no-build-isolation (pip caches the wheel,
#    so only the first build on a machine takes ~17 minutes on 2 cores);
#  - installs meshop in editable mode with its test and docs extras, every package constrained to
#    the installed torch so that nothing pulls a different (CUDA) build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${MESHOP_VENV:-.venv}
TORCH_VERSION=${MESHOP_TORCH_VERSION:-2.13.0}

if [ ! -x "$VENV/bin/python" ]; then
    echo "[install] creating virtual environment $VENV"
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)

if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "[install] installing torch==$TORCH_VERSION"
    "${PIP[@]}" install -q "torch==$TORCH_VERSION" numpy
fi
installed_torch=$("$PY" -c "import torch; print(torch.__version__.split('+')[0])")
constraints="$VENV/torch-constraints.txt"
echo "torch==$installed_torch" > "$constraints"
echo "[install] torch $installed_torch"

if ! "$PY" -c "import torch_cluster" >/dev/null 2>&1; then
    echo "[install] building torch-cluster (first time on a machine: ~17 min; later: cached wheel)"
    "${PIP[@]}" install -q -c "$constraints" ninja setuptools wheel
    MAX_JOBS=${MAX_JOBS:-2} PATH="$VENV/bin:$PATH" \
        "${PIP[@]}" install -q --no-build-isolation -c "$constraints" torch-cluster
fi

stamp="$VENV/.meshop-install-stamp"
want=$(cat pyproject.toml scripts/install.sh | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! "$PY" -c "import meshop" >/dev/null 2>&1; then
    echo "[install] installing meshop (editable) with test and docs extras"
    "${PIP[@]}" install -q -c "$constraints" -e ".[test,docs]"
    echo "$want" > "$stamp"
fi
echo "[install] done: $("$PY" -c "import meshop, torch, torch_cluster, torch_geometric; print('meshop', meshop.__version__, '| torch', torch.__version__, '| torch_geometric', torch_geometric.__version__, '| torch_cluster', torch_cluster.__version__)")"
