"""Measuring revisions side by side in one session (``quick``, ``daemon_ab``) and summarising profiles."""
