"""The read side: the search index written (`index`, `index_works`, `video_guess`) and read
(`index_store`), text and typos (`text`, `fuzzy`), the query language and ranked search
(`querylang`, `search`, `search_arrays`, `search_results`, `work_values`), the analysts' SQL
(`views`, `sandbox`, `part_damage`, `results`) and the round report (`status`).
May import crawl_io and jobs; never pipeline."""
