"""Embedded vLLM simulator: engine model (`engine`), HTTP surface (`server`), child process (`launcher`).

Run it with `python -m workload.sim --port 0` or start it from Python with
`workload.sim.launcher.SimProcess`. docs/simulator.md says what it models.
"""
