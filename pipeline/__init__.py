"""Luigi tasks for the rounds, scheduling policies, the CLI, the demo and the simulator."""
