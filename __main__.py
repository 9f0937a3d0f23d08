"""`python -m sharecrawl`: the console script's entry point, for a process that starts
another (`watch --crawl`) with this interpreter."""

import sys

from sharecrawl.cli.main import main

sys.exit(main())
