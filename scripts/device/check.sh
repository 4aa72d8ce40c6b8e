#!/usr/bin/env bash
# The GPU check, run on a lent CUDA machine whose Python already has torch, torch_geometric, h5py,
# tqdm and matplotlib but no network: from the repository root there, with these files beside it
# in .gpu/ (git-ignored): tree.tar.gz (`git archive HEAD` plus uncommitted files to check),
# whl/ (meshio, scikit-fem and triangle wheels for its Python, `pip download --only-binary`),
# torch_cluster-1.6.3.tar.gz (the sdist) or torch_cluster_built.tar.gz (an earlier build), and
# build_torch_cluster_cuda.py. Writes log.txt (and a reusable torch-cluster build) to $OUT.
# Builds torch-cluster for the GPU (about 95 s on 16 cores), runs tests/models/test_cuda.py,
# then the benchmarks with CUDA tables.
set -u
export PYTHONUNBUFFERED=1
START=$(date +%s)
LOG=$OUT/log.txt
say() { echo "[$(( $(date +%s) - START )) s] $*" | tee -a $LOG; }
mkdir -p /tmp/repo /tmp/site && tar xzf .gpu/tree.tar.gz -C /tmp/repo
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/whl/*.whl >>$LOG 2>&1
export PYTHONPATH=/tmp/site:/tmp/repo
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >>$LOG 2>&1
python3 -c "import torch, torch_geometric, numpy, scipy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'pyg', torch_geometric.__version__, 'numpy', numpy.__version__, 'scipy', scipy.__version__, torch.cuda.get_device_name())" >>$LOG 2>&1
say "building torch-cluster"
if [ -f .gpu/torch_cluster_built.tar.gz ]; then tar xzf .gpu/torch_cluster_built.tar.gz -C /tmp/site
else timeout 300 python3 .gpu/build_torch_cluster_cuda.py .gpu/torch_cluster-1.6.3.tar.gz >>$LOG 2>&1; say "build rc $?"
  (cd /tmp/site && tar czf $OUT/torch_cluster_built.tar.gz torch_cluster); fi
python3 -c "import torch, torch_cluster; p=torch.rand(1000,2,device='cuda'); print('torch_cluster', torch_cluster.__version__, torch_cluster.fps(p, ratio=0.1).device)" >>$LOG 2>&1 || { say "torch_cluster import failed"; exit 1; }
cd /tmp/repo
say "CUDA tests"
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/models/test_cuda.py -rs 2>&1 | tail -40 >>$LOG
say "benchmarks"
mkdir -p $OUT/bench
timeout 150 python3 -m benchmarks.speed.whole_models --device cuda --threads 16 --timeout 40 --out $OUT/bench >>$LOG 2>&1; say "whole_models rc $?"
timeout 80 python3 -m benchmarks.speed.neighbor_search --device cuda --threads 16 --timeout 30 --out $OUT/bench >>$LOG 2>&1; say "neighbor_search rc $?"
timeout 70 python3 -m benchmarks.speed.local_attention --device cuda --threads 16 --timeout 30 --out $OUT/bench >>$LOG 2>&1; say "local_attention rc $?"
say "done"
