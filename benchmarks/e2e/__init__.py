"""One system end to end, each script a module: ``python -m benchmarks.e2e.bench_producer --help``."""
