"""Maintenance services: rescue of expired leases, and (later) pruning and rollups."""
