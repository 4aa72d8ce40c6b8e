"""What the benchmark entry points share: measurement, tables, settings, reference formulations and
workloads. Nothing here is an entry point."""
