"""Scheduling: which partitions a round scans. `rates` estimates how often a partition
changes, `history` keeps the scan outcomes it learns from, `choice` holds what every policy
shares (state, budget, packing), `policies` names them, `optimal` and `sensors` are the two
that plan under the budget, and `signals` is what change notifications tell any policy.

Part of pipeline: may import crawl_io, jobs, queries and pipeline.
"""
