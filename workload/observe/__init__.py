"""Observing the target: probe, /metrics, server log, fingerprint."""
