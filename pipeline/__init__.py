"""The Luigi tasks of a round, one stage a module (`inject`, `generate`, `fetch`, `update`,
`index`; fetching in `fetch_host`, `fetch_workers`, `shards`; Update's parts in
`host_merge`, `host_rewrite`, `repartition`, `stats_parts`, `publish`), the rounds that
chain them (`rounds`), their `targets`, `settings`, crawl rules (`rules_store`), `progress`
and stopping (`interrupt`), and scheduling (pipeline.scheduling).

May import crawl_io, jobs and queries (the Index stage builds the search index); never the
faces above it.
"""
