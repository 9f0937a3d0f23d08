"""Series, season, episode (or film title and year) of videos left without series and title,
guessed from file names by guessit (crawl_io.tags.video_names) for the search index; guessit
is slow per name, so many names go to a child process (`python -m queries.video_guess`)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

Guess = tuple[object, ...]  # filename, title, series, season, episode, year, resolution
GUESS_IN_BACKGROUND = 100  # names; fewer are guessed in this process


def guess(filename: str) -> Guess:
    from sharecrawl.crawl_io.tags.video_names import guess_video_name  # guessit loads only here

    try:
        video = guess_video_name(filename)
    except Exception:  # guessit may fail on odd names; the name stem still identifies it
        return (filename, None, None, None, None, None, None)
    is_episode = video.is_episode and video.episode is not None
    return (
        filename,
        None if is_episode else video.title,
        video.title if is_episode else None,
        video.season if is_episode else None,
        video.episode if is_episode else None,
        video.year,
        video.resolution,
    )


def guess_all(filenames: list[str]) -> list[Guess]:
    return [guess(name) for name in filenames]


def start_guessing(names: list[str]) -> Callable[[], list[Guess]]:
    """Start guessing `names` (distinct file names); returns a function giving the guesses."""
    if len(names) < GUESS_IN_BACKGROUND:
        return lambda: guess_all(names)
    # A plain child process, not multiprocessing: spawn would re-import the caller's
    # __main__, and fork is unsafe with DuckDB's threads running. `-m` finds the project in cwd.
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "sharecrawl.queries.video_guess"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[1],
            text=True,
        )
        assert child.stdin is not None
        child.stdin.write(json.dumps(names))
        child.stdin.close()
    except OSError:
        return lambda: guess_all(names)

    def result() -> list[Guess]:
        assert child.stdout is not None
        output = child.stdout.read()
        if child.wait() != 0:  # the child failed: guess here rather than lose the names
            return guess_all(names)
        return [tuple(row) for row in json.loads(output)]

    return result


if __name__ == "__main__":
    # The guessing child of start_guessing: JSON list of names in, JSON guesses out.
    json.dump(guess_all(json.load(sys.stdin)), sys.stdout)
