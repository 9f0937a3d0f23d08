"""What a video's file name says (film title and year, or series, season and episode), by
guessit: the one mapping from guessit's answer to our columns, for the tag reader and the
search index alike."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sharecrawl.crawl_io.tags.record import fill, first


@dataclass(frozen=True)
class VideoName:
    title: str | None  # the film's title, or the series' name when is_episode
    episode_title: str | None
    is_episode: bool  # guessit took the name for an episode
    season: int | None
    episode: int | None
    year: int | None
    resolution: int | None  # lines: 720 for '720p'


def guess_video_name(name: str) -> VideoName:
    """guessit's reading of a name ('Lost.S06E01.720p.mp4', 'Lost/Season 6/01.mp4').
    Raises what guessit raises on a name it cannot parse."""
    from guessit import guessit  # loads its rule engine only when a video is seen

    guess = guessit(name)
    title = first(guess.get("title"))
    episode_title = first(guess.get("episode_title"))
    size = str(guess.get("screen_size") or "")
    resolution = re.match(r"(\d{3,4})[pi]", size)
    return VideoName(
        title=str(title) if title else None,
        episode_title=str(episode_title) if episode_title else None,
        is_episode=guess.get("type") == "episode",
        season=_whole(first(guess.get("season"))),  # multi-episode files: the first
        episode=_whole(first(guess.get("episode"))),
        year=_whole(guess.get("year")),
        resolution=int(resolution.group(1)) if resolution else None,
    )


def fill_from_video_name(row: dict[str, Any], name: str) -> None:
    """Series, season, episode, year and title from a video's name where tags lack them."""
    base = name.rsplit("/", 1)[-1]
    names = [base] if base == name else [base, name]  # folders may tell what the name does not
    for each in names:
        video = guess_video_name(each)
        fill(row, "series", video.title if video.is_episode else None)
        fill(row, "title", video.episode_title if video.is_episode else video.title)
        fill(row, "season", video.season)
        fill(row, "episode", video.episode)
        fill(row, "year", video.year)


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
