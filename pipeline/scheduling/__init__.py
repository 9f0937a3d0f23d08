"""Scheduling: which partitions a round scans (docs/DESIGN.md, Scheduling). `rates` estimates
change rates from `history`, `choice` is what every policy shares, `policies` names them,
`optimal` and `sensors` plan under the budget, `signals` is what notifications tell any policy.
Part of pipeline: may import crawl_io, jobs, queries and pipeline."""
