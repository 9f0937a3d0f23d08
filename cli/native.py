"""Importing the native libraries a command needs, safe from a Ctrl-C."""

from __future__ import annotations

# Native libraries whose import a Ctrl-C must not cut short: duckdb's bindings abort the
# process ("Critical nanobind error") when an exception lands while they register types.
NATIVE = ("pyarrow", "duckdb")


def import_native() -> None:
    """Import NATIVE with SIGINT and SIGTERM held back, then act on one that came."""
    import importlib
    import signal

    came: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    before = {s: signal.signal(s, lambda signum, _frame: came.append(signum)) for s in held}
    try:
        for module in NATIVE:
            importlib.import_module(module)
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    if came:
        signal.raise_signal(came[0])
