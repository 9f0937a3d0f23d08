"""The Luigi tasks of a round, one stage a module (inject, generate, fetch, update, publish,
index), the rounds that chain them (rounds), and scheduling in pipeline.scheduling."""
