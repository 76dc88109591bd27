"""Topic churn must not grow the broker's memory (issue 12's soak: RSS flat under attack)."""

from __future__ import annotations

from pathlib import Path

from lkstream import Broker


def test_creating_and_deleting_topics_keeps_no_record_per_partition(tmp_path: Path) -> None:
    # Found by benchmarks/soak/soak_abuse.py: every partition ever created left its LogRecovery in
    # Broker.recoveries (about 440 B each: 130 MB after 300 topics of 1,000 partitions).
    broker = Broker(persist_dir=str(tmp_path), fsync_mode="none")
    try:
        broker.create_topic("kept", 2)
        for round_ in range(5):
            broker.create_topic(f"churn{round_}", 50)
            broker.delete_topic(f"churn{round_}")
        assert broker.recoveries == []
        assert broker.stats().recovery_truncations == 0
    finally:
        broker.close()
    reopened = Broker(persist_dir=str(tmp_path), fsync_mode="none")
    try:
        # What start-up recovered is still reported, one entry per partition opened then.
        assert len(reopened.recoveries) == 2
        assert all(r.truncated_bytes == 0 for r in reopened.recoveries)
    finally:
        reopened.close()
