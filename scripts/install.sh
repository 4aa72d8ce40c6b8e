#!/usr/bin/env bash
# One-step, idempotent set-up of meshop into ./.venv (git-ignored).
#  - creates the virtual environment if it is missing;
#  - installs torch 2.13.0 only when the environment has no torch (a user's own torch is kept);
#  - builds torch-cluster from source with --no-build-isolation, without debug info (-g0; its link
#    step strips it anyway) and, for a CPU-only build, MAX_JOBS extensions at a time (default: the
#    number of CPUs); pip caches the wheel, so only the first build on a machine takes minutes (the
#    README gives the time measured on 2 cores);
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
    jobs=${MAX_JOBS:-$(nproc 2>/dev/null || echo 2)}
    echo "[install] building torch-cluster (first time on a machine: minutes; later: cached wheel)"
    "${PIP[@]}" install -q -c "$constraints" setuptools wheel
    # torch-cluster's setup.py compiles without ninja (use_ninja=False) and one extension after
    # another, so MAX_JOBS alone does nothing. Each of its 16 files takes about a minute of CPU,
    # nearly half of it for debug info (-g from Python's CFLAGS) that the link step's -s strips:
    # -g0, appended through CPPFLAGS (which distutils adds after CFLAGS), saves that and leaves the
    # machine code as it is. setuptools' build_ext builds the extensions in parallel threads with
    # `parallel = N`, read from the config file that DIST_EXTRA_CONFIG names. Only for a CPU-only
    # build (torch sees no GPU, or FORCE_ONLY_CPU=1): for .cu files torch's BuildExtension swaps
    # the compiler that the threads share, so a CUDA build keeps the serial path.
    build_env=(MAX_JOBS="$jobs" PATH="$VENV/bin:$PATH" CPPFLAGS="${CPPFLAGS:+$CPPFLAGS }-g0")
    if [ "$jobs" -gt 1 ] && "$PY" -c "
import os, sys, torch
flag = lambda name: os.getenv(name, '0') == '1'
cuda = flag('FORCE_CUDA') or flag('FORCE_ONLY_CUDA') or torch.cuda.is_available()
sys.exit(0 if flag('FORCE_ONLY_CPU') or not cuda else 1)"; then
        build_cfg="$(cd "$VENV" && pwd)/torch-cluster-build.cfg"
        printf '[build_ext]\nparallel = %s\n' "$jobs" > "$build_cfg"
        build_env+=(DIST_EXTRA_CONFIG="$build_cfg")
    fi
    env "${build_env[@]}" \
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
