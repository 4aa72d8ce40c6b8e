"""meshop's benchmarks: entry points run as ``python -m benchmarks.<folder>.<name>`` from the
repository root (``benchmarks/README.md`` lists them); their tables go to ``benchmarks/results/``.
"""
