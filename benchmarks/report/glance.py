"""The page's first table: one line per question, LKSTREAM's figure beside the best peer's and the limit."""

from __future__ import annotations

from typing import Any

from benchmarks.report.fmt import Result, caption, num, table
from benchmarks.report.peers import PEERS
from benchmarks.report.runs import quick_row
from benchmarks.suite.report import Result as Suite


def _median(summary: dict[str, Any] | None) -> float | None:
    return None if not summary else float(summary["median"])


def _short(label: str) -> str:
    """``Redis Streams`` for ``Redis Streams (AOF everysec)``."""
    return label.split(" (", maxsplit=1)[0]


class _Figures:
    """Medians out of one suite result, shown with their unit."""

    def __init__(self, res: Result) -> None:
        self.s = Suite(res.doc)
        self.phys = (res.doc.get("extras") or {}).get("physical", {})
        self.trip = (res.doc.get("extras") or {}).get("loopback_round_trip_us", {})

    def of(self, system: str, metric: str, size: int, fld: str) -> float | None:
        return _median(self.s.field(system, metric, fld, size, 1))

    def best_peer(self, metric: str, size: int, fld: str, lower: bool = False) -> str:
        found = [(v, p) for p in PEERS if p in self.s.systems and (v := self.of(p, metric, size, fld)) is not None]
        if not found:
            return "n/a"
        value, peer = min(found) if lower else max(found)
        return f"{_unit(value, fld)} ({_short(self.s.label(peer))})"

    def limit(self, key: str) -> str:
        value = _median(self.phys.get(key))
        return "n/a" if value is None else _unit(value, "MB_per_s")

    def named_limit(self, words: str, key: str) -> str:
        """``loopback TCP 3.9 GB/s``, or nothing when the run did not measure it."""
        return "" if key not in self.phys else f"{words} {self.limit(key)}"


def _unit(value: float | None, fld: str) -> str:
    if value is None:
        return "n/a"
    if fld == "MB_per_s":
        return f"{value / 1000:.1f} GB/s" if value >= 1000 else f"{value:.0f} MB/s"
    if fld.endswith("_ms"):
        return f"{value:.2f} ms" if value < 10 else f"{value:.0f} ms"
    if fld == "rows_per_s":
        return f"{num(value)} rows/s"
    return f"{num(value)} msg/s"


def _both(f: _Figures, size: int, fld: str) -> str:
    """The embedded produce figure through ``Producer.send`` and through ``produce_many``."""
    lk = "lkstream-embedded"
    return (
        f"{_unit(f.of(lk, 'produce', size, fld), fld)} (`Producer.send`),"
        f" {_unit(f.of(lk, 'produce_many', size, fld), fld)} (`produce_many`)"
    )


def _rss(f: _Figures, system: str) -> str:
    value = _median(f.s.field(system, "resources", "peak_rss_MB"))
    return "n/a" if value is None else f"{value:,.0f} MB"


def glance(peers: Result, quick: Result, recovery: Result) -> list[str]:
    f = _Figures(peers)
    lk = "lkstream-embedded"
    trip = f.trip.get("p99_us")
    rows = [
        [
            "[Embedded produce](#embedded-produce-and-consume), 200 B records",
            _both(f, 200, "msg_per_s"),
            f.best_peer("produce", 200, "msg_per_s"),
            "",
        ],
        [
            "[Embedded produce](#embedded-produce-and-consume), 4 KiB records",
            _both(f, 4096, "MB_per_s"),
            f.best_peer("produce", 4096, "MB_per_s"),
            f"disk {f.limit('fio_seq_write_buffered')} buffered, {f.limit('fio_seq_write_fdatasync')} fdatasync'd",
        ],
        [
            "[Embedded consume](#embedded-produce-and-consume), 4 KiB records",
            _unit(f.of(lk, "consume", 4096, "MB_per_s"), "MB_per_s"),
            f.best_peer("consume", 4096, "MB_per_s"),
            f"page cache {f.limit('page_cache_read')}",
        ],
        [
            "[Daemon produce](#the-daemon-grpc-http-and-the-kafka-protocol), 200 B, one client",
            _unit(f.of("lkstream-daemon", "produce_many", 200, "msg_per_s"), "msg_per_s")
            + " (Python client, `produce_many`), "
            + _unit(f.of("lkstream-kafka", "produce", 200, "msg_per_s"), "msg_per_s")
            + " (Kafka API)",
            f.best_peer("produce", 200, "msg_per_s"),
            f.named_limit("loopback TCP", "loopback_tcp"),
        ],
        [
            "[Daemon consume](#the-daemon-grpc-http-and-the-kafka-protocol), 200 B, one client",
            _unit(f.of("lkstream-daemon", "consume", 200, "msg_per_s"), "msg_per_s")
            + " (Python client), "
            + _unit(f.of("lkstream-kafka", "consume", 200, "msg_per_s"), "msg_per_s")
            + " (Kafka API)",
            f.best_peer("consume", 200, "msg_per_s"),
            f.named_limit("loopback TCP", "loopback_tcp"),
        ],
        [
            "[Ack latency](#latency-at-a-fixed-rate), 10,000 msg/s of 1 KiB, p99",
            _unit(f.of(lk, "ack_10k", 1024, "p99_ms"), "p99_ms")
            + " embedded, "
            + _unit(f.of("lkstream-daemon", "ack_10k", 1024, "p99_ms"), "p99_ms")
            + " daemon, "
            + _unit(f.of("lkstream-kafka", "ack_10k", 1024, "p99_ms"), "p99_ms")
            + " Kafka API",
            f.best_peer("ack_10k", 1024, "p99_ms", lower=True),
            "" if trip is None else f"a loopback round trip: {trip['median'] / 1000:.3f} ms (p99)",
        ],
        [
            "[Memory](#memory): peak RSS over the suite's phases",
            f"{_rss(f, lk)} embedded, {_rss(f, 'lkstream-daemon')} daemon",
            ", ".join(f"{_short(f.s.label(p))} {_rss(f, p)}" for p in PEERS if f.s.get(p, "resources")),
            "",
        ],
        [
            "[Recovery](#recovery-time): ready after SIGKILL, 10 GB log",
            f"{recovery.doc['restart_summary']['ready_s']['median'] * 1e3:.0f} ms",
            "not measured",
            "",
        ],
        [
            "[Spark](#spark): source through the daemon / sink",
            f"{_unit(_median(quick_row(quick, 'source_bootstrap_noop/rows_per_s')), 'rows_per_s')} /"
            f" {_unit(_median(quick_row(quick, 'sink/rows_per_s')), 'rows_per_s')}",
            "",
            f"Spark's Parquet read {_unit(_median(quick_row(quick, 'parquet_noop/rows_per_s')), 'rows_per_s')}",
        ],
    ]
    hdr = ["Question", "LKSTREAM", "Best peer, same run", "The machine's limit, same run"]
    return table(hdr, rows) + caption(peers, quick, recovery, note="Medians; the sections have the spread.")
