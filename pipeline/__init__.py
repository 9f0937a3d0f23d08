"""The Luigi tasks of a round (inject, generate, fetch, update, index), the modules they use,
the rounds that chain them, and scheduling (pipeline.scheduling). May import crawl_io, jobs
and queries; never the faces above them."""
