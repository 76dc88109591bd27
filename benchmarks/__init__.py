"""LKSTREAM's benchmarks: code, never part of the test command. Run each as a module from the
repository's root (``python -m benchmarks.<folder>.<name> --help``); docs/benchmarks.md says which
one answers which question, and ``python -m benchmarks.report`` rebuilds that page's tables.

``suite/``    LKSTREAM side by side with Tansu, NATS JetStream and Redis Streams, and the machine's
              limits, in one run (``make bench``).
``e2e/``      one system end to end: embedded produce, consume, recovery and latency; the daemon over
              gRPC, HTTP and the Kafka protocol; Spark; groups, commits, many partitions.
``soak/``     long runs: the daemon for 30 minutes, under attack, beside admin churn.
``micro/``    one mechanism in isolation: batch validation, access checks, the JVM segment reader.
``tools/``    comparing revisions side by side (``quick``, ``daemon_ab``) and reading profiles (``stacks``).
``report/``   the generated tables of docs/benchmarks.md.
``results/``  the result files the docs cite (older runs stay in git history).
``_common``   flags, statistics, machine facts, result files and temporary directories, for all of them.
"""
