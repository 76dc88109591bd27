"""Hypothesis property tests: round trips, fuzzed validation, a PartitionLog state machine."""
