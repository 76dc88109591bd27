"""One mechanism at a time, in one process: what a bound named in docs/benchmarks.md costs alone."""
