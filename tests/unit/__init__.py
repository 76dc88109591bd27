"""Unit tests: one file per module of the lkstream package."""
