"""Local position-attention: meshop (torch-cluster neighbour lists) against a dense mask, with PiT's
quantile field (N nodes onto a latent mesh) and a kNN field (N nodes onto themselves).

    python -m benchmarks.speed.local_attention            # full table (a few minutes on one core)
    python -m benchmarks.speed.local_attention --quick    # smoke test
"""

from __future__ import annotations

from benchmarks.lib.attention_layers import agreement, measure_cases
from benchmarks.lib.common import comparison_table, devices, parse_args, progress, write_results
from benchmarks.lib.settings import LAYER_HEADS, LAYER_WIDTH, LOCAL_K, LOCAL_LATENT, LOCAL_QUANTILE

#: dense matrices held at the peak per N_dst * N_src entries, before any dense case measured it
DEFAULT_K = {False: 6.0, True: 10.0}
#: the receptive fields, and their captions
FIELDS = {"quantile": {"quantile": LOCAL_QUANTILE}, "knn": {"k": LOCAL_K}}
CAPTIONS = {
    "quantile": f"{LOCAL_QUANTILE:.0%} quantile, N sources onto {LOCAL_LATENT} targets",
    "knn": f"{LOCAL_K} nearest neighbours, N sources onto the same N targets",
}


def cases(quick: bool) -> list[tuple[str, int]]:
    if quick:
        return [("quantile", 1000), ("quantile", 3000), ("knn", 1000), ("knn", 3000)]
    return [("quantile", n) for n in (10**3, 10**4, 10**5)] + [
        ("knn", n) for n in (10**3, 10**4, 10**5, 10**6)
    ]


def targets(field: str) -> int | None:
    """The quantile field's latent mesh; None: the kNN field's nodes onto themselves."""
    return LOCAL_LATENT if field == "quantile" else None


def check_agreement(n: int) -> float:
    """Largest difference between meshop and the dense form on ``n`` nodes, both fields."""
    return agreement([(n, targets(field), FIELDS[field]) for field in FIELDS])


def main(argv=None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    progress(f"meshop and dense agree to {check_agreement(600 if args.quick else 3000):.1e}")
    measured = [
        (
            dict(field=field, n_src=n, n_dst=targets(field) or n),
            dict(n_src=n, n_dst=targets(field), **FIELDS[field]),
        )
        for field, n in cases(args.quick)
    ]
    records = measure_cases(args, measured, DEFAULT_K)
    tables = {
        f"{device.upper()}, {CAPTIONS[field]}, {'forward + backward' if bw else 'forward'}": (
            comparison_table(
                records,
                {"device": device, "field": field, "backward": bw},
                ["n_src", "n_dst"],
                ["N_src", "N_dst"],
            )
        )
        for device in devices(args)
        for field in FIELDS
        for bw in (False, True)
    }
    title = f"Local position-attention (width {LAYER_WIDTH}, {LAYER_HEADS} heads)"
    write_results("local_attention", title + ": meshop vs dense mask", args, tables, records)


if __name__ == "__main__":
    main()
