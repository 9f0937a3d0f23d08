"""The edges of sharecrawl: sources, tag reading, Arrow schemas and the crawl directory."""
