"""The read side: the search index (build, query language, ranked search), the analysts'
SQL views in their sandbox, `sql --output` files and the round report."""
