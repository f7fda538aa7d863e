"""Measurement: transport, client, SSE, records, stats, SLOs, artifacts."""
