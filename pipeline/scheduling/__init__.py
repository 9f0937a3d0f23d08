"""Scheduling: which partitions a round scans (docs/DESIGN.md, Scheduling): `rates` from
`history`, what every policy shares in `choice`, the policies by name in `policies`."""
