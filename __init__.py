"""sharecrawl: a fresh, searchable index of the media files that the hosts of a LAN share
over SMB (docs/DESIGN.md). The repository's top-level folders are this package's
subpackages (setup.cfg's package_dir); its defaults are `luigi.cfg` beside this file."""
