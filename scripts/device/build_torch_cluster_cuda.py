"""Build torch-cluster 1.6.3 (CUDA + CPU kernels) into /tmp/site/torch_cluster, one library per
process in parallel (torch.utils.cpp_extension.load, ninja each)."""

import os
import shutil
import sys
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor

SRC = "/tmp/tc/torch_cluster-1.6.3"
LIBS = ["version", "grid", "graclus", "fps", "rw", "sampler", "nearest", "knn", "radius"]


def build(lib):
    from torch.__config__ import parallel_info
    from torch.utils.cpp_extension import load

    csrc = os.path.join(SRC, "csrc")
    sources = [os.path.join(csrc, f"{lib}.cpp")]
    for sub, ext in (("cpu", "cpp"), ("cuda", "cu")):
        p = os.path.join(csrc, sub, f"{lib}_{sub}.{ext}")
        if os.path.exists(p):
            sources.append(p)
    cflags = ["-O2", "-DWITH_PYTHON", "-DWITH_CUDA", "-Wno-sign-compare", "-g0"]
    ldflags = []
    if "backend: OpenMP" in parallel_info():
        cflags += ["-DAT_PARALLEL_OPENMP", "-fopenmp"]
        ldflags += ["-fopenmp"]
    out = f"/tmp/tcb/{lib}"
    os.makedirs(out, exist_ok=True)
    t = time.time()
    load(
        name=f"_{lib}_cuda",
        sources=sources,
        extra_cflags=cflags,
        extra_cuda_cflags=["-O2", "--expt-relaxed-constexpr", "-DWITH_PYTHON", "-DWITH_CUDA"],
        extra_ldflags=ldflags,
        extra_include_paths=[csrc],
        build_directory=out,
        with_cuda=True,
        is_python_module=False,
        verbose=False,
    )
    return lib, time.time() - t


if __name__ == "__main__":
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    os.environ.setdefault("MAX_JOBS", "4")
    os.makedirs("/tmp/tc", exist_ok=True)
    with tarfile.open(sys.argv[1]) as tar:
        tar.extractall("/tmp/tc")
    with ProcessPoolExecutor(len(LIBS)) as pool:
        for lib, seconds in pool.map(build, LIBS):
            print(f"built _{lib}_cuda in {seconds:.0f} s", flush=True)
    dest = "/tmp/site/torch_cluster"
    shutil.copytree(os.path.join(SRC, "torch_cluster"), dest, dirs_exist_ok=True)
    for lib in LIBS:
        shutil.copy(f"/tmp/tcb/{lib}/_{lib}_cuda.so", dest)
    print("installed", sorted(os.listdir(dest)))
