"""The search page for everyone on the LAN: `sharecrawl serve` (Starlette under uvicorn)."""
