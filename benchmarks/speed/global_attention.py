"""Global and cross position-attention: meshop against the dense form of the papers' code.

python -m benchmarks.speed.global_attention            # full table (a few minutes on one core)
python -m benchmarks.speed.global_attention --quick    # smoke test
"""

from __future__ import annotations

from benchmarks.lib.attention_layers import agreement, measure_cases
from benchmarks.lib.common import comparison_table, devices, parse_args, progress, write_results
from benchmarks.lib.settings import LAYER_HEADS, LAYER_WIDTH

#: meshop cases with more target-source pairs than this are left out of the full run (time only)
MAX_PAIRS = 5 * 10**8
#: dense matrices held at the peak, per N_dst * N_src entries, before any dense case measured it
DEFAULT_K = {False: 5.0, True: 9.0}


def cases(quick: bool) -> list[tuple[str, int, int]]:
    """(kind, N_src, N_dst): cross attention onto a target mesh, global = self-attention."""
    if quick:
        return [("cross", 1000, 256), ("cross", 3000, 512), ("global", 1024, 1024)]
    cross = [("cross", s, t) for s in (10**3, 10**4, 10**5, 10**6) for t in (256, 1024, 4096)]
    return cross + [("global", n, n) for n in (1024, 4096, 16384)]


def check_agreement(n_src: int = 2000, n_dst: int = 300) -> float:
    """Largest difference between meshop and the dense form on one cross and one self case."""
    return agreement([(n_src, n_dst, {}), (n_src, None, {})])


def main(argv=None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    diff = check_agreement(500, 100) if args.quick else check_agreement()
    progress(f"meshop and dense agree to {diff:.1e}")
    measured = [
        (dict(kind=kind, n_src=s, n_dst=t), dict(n_src=s, n_dst=None if kind == "global" else t))
        for kind, s, t in cases(args.quick)
    ]
    records = measure_cases(args, measured, DEFAULT_K, MAX_PAIRS)
    tables = {
        f"{device.upper()}, {'forward + backward' if backward else 'forward'}": comparison_table(
            records,
            {"device": device, "backward": backward},
            ["kind", "n_src", "n_dst"],
            ["kind", "N_src", "N_dst"],
        )
        for device in devices(args)
        for backward in (False, True)
    }
    title = f"Global and cross position-attention (width {LAYER_WIDTH}, {LAYER_HEADS} heads)"
    write_results("position_attention", title + ": meshop vs dense", args, tables, records)


if __name__ == "__main__":
    main()
