"""ledgerfs benchmarks: each `bench_<name>.py` runs with ``python -m benchmarks.bench_<name>``."""
