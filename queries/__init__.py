"""The read side: the search index written (`index`, with `index_works` the SQL a build and
an update share, `video_guess` guessit in a child process) and read (`index_store`), text
and typo tolerance (`text`, `fuzzy`), the query language (`querylang`), ranked search
(`search`, `search_arrays`, `search_results`, `work_values`), the analysts' SQL views in
their sandbox (`views`, `sandbox`, `part_damage`, `results`) and the round report (`status`).

May import crawl_io and jobs; never pipeline.
"""
