"""The demo LAN behind `sharecrawl demo`: hosts as local folders of real tagged media
(`lan`), the three demo rounds (`demo`), and the media templates with their tag writer
(`templates`), which the tests use too."""
