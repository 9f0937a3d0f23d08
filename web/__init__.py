"""The search page for everyone on the LAN, `sharecrawl serve`: the server (`server`), the
Starlette app (`app`), one request (`pages`) on the version served now (`live`), what the
page shows beside the results (`catalog`, `facets`, `recent`) and its page models (`views`);
HTML in templates/, assets in static/.

May import crawl_io, jobs, queries and pipeline; not sensors, simulator or demolan.
"""
