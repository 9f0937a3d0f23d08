"""The search page for everyone on the LAN, `sharecrawl serve` (docs/web.md): `server`, the
Starlette `app`, one request (`pages`) on the version served now (`live`), what the page shows
beside the results (`catalog`, `facets`, `recent`), its page models (`views`), `covers`.
May import crawl_io, jobs, queries and pipeline; not sensors, simulator or demolan."""
