"""The `sharecrawl` command: the parser and its dispatch (`main`), the checks of its input
(`inputs`) and `status --plot`'s charts (`plots`). Nothing below it imports it."""
