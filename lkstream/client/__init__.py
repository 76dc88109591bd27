"""Client layer: consumers (and, later, the remote client) over the broker API."""
