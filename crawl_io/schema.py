"""Arrow schemas of the crawldb tables and the segment files: the project's data contract.

Paths inside a share use '/' and no leading slash; the share root is ''. Times are UTC
timestamps with microsecond precision.
"""

from __future__ import annotations

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")

HOSTS = pa.schema(
    [
        ("host", pa.string()),
        ("url", pa.string()),  # the hosts-file URL without any password
        ("online", pa.bool_()),
        ("last_seen", TS),
        ("last_error", pa.string()),
        ("list_s_per_folder", pa.float64()),
        ("tag_s_per_file", pa.float64()),
        ("first_seen", TS),
        ("last_check", TS),
        # why the host was (not) crawled last round: crawl_io.sources' statuses, or 'error'
        ("status", pa.string()),
        # what the host said about itself before any login (SMB negotiate, NTLM CHALLENGE)
        ("address", pa.string()),  # the address that answered last
        ("netbios_name", pa.string()),
        ("dns_name", pa.string()),
        ("server_guid", pa.string()),
        ("dialect", pa.string()),  # "3.1.1"
        ("signing_required", pa.bool_()),
        ("discovered_by", pa.string()),  # the hosts file's range line; null: listed by name
        ("addresses_seen", pa.list_(pa.string())),
        # a found machine's share roots, 'share:volume serial:root file ID'
        # (crawl_io.share_marks): what tells two machines of one name and ServerGuid apart
        ("share_marks", pa.list_(pa.string())),
    ]
)
# A host as people know it ("DORM5-PC", not 10.20.3.17), over a hosts table's columns.
HOST_NAME_SQL = "coalesce(netbios_name, dns_name, host)"

SCAN_EVENT = pa.struct(
    [
        ("t", TS),
        ("changed", pa.bool_()),
        # every change since the previous scan was notified (a watched, trusted share): a
        # complete signal for the rate estimate; null in histories written before it existed
        ("complete", pa.bool_()),
    ]
)

PARTITIONS = pa.schema(
    [
        ("partition_id", pa.string()),
        ("host", pa.string()),
        ("share", pa.string()),
        ("root", pa.string()),
        ("lo", pa.string()),
        ("hi", pa.string()),
        ("parent_id", pa.string()),
        ("hash", pa.string()),
        ("n_folders", pa.int64()),
        ("n_files", pa.int64()),
        ("n_media", pa.int64()),
        ("bytes", pa.int64()),
        ("est_scan_s", pa.float64()),
        ("last_scan", TS),
        ("last_change", TS),
        ("n_scans", pa.int64()),
        ("n_changes", pa.int64()),
        ("rate_per_h", pa.float64()),
        ("status", pa.string()),
        ("first_seen", TS),
        ("history", pa.list_(SCAN_EVENT)),  # scans over the rate window, oldest first
    ]
)

# One row per file or folder seen by a scan (a segment's listing/ parts).
LISTING = pa.schema(
    [
        ("host", pa.string()),
        ("share", pa.string()),
        ("path", pa.string()),
        ("name", pa.string()),
        ("is_dir", pa.bool_()),
        ("size", pa.int64()),
        ("mtime", TS),
        ("partition_id", pa.string()),
    ]
)

FILES = pa.schema([*LISTING, ("first_seen", TS), ("last_seen", TS)])

MEDIA = pa.schema(
    [
        ("host", pa.string()),
        ("share", pa.string()),
        ("path", pa.string()),
        ("size", pa.int64()),
        ("mtime", TS),
        ("kind", pa.string()),
        ("format", pa.string()),
        ("artist", pa.string()),
        ("title", pa.string()),
        ("album", pa.string()),
        ("albumartist", pa.string()),
        ("track", pa.int32()),
        ("disc", pa.int32()),
        ("year", pa.int32()),
        ("genre", pa.string()),
        ("duration_s", pa.float64()),
        ("bitrate_kbps", pa.int32()),
        ("samplerate", pa.int32()),
        ("channels", pa.int32()),
        ("series", pa.string()),
        ("season", pa.int32()),
        ("episode", pa.int32()),
        ("tag_error", pa.string()),
        ("tag_source", pa.string()),  # where artist/title came from: 'tags' or 'name'
        ("partition_id", pa.string()),
        ("tagged_at", TS),
        # when the crawl first saw media at this path (a file moved within its host keeps its
        # own), and when its row last changed (added, changed, retagged, moved): kept across
        # rounds; null in parts written before these columns existed (COLUMNS_ADDED)
        ("first_seen", TS),
        ("last_changed", TS),
    ]
)
# Columns added to a table after its first parts were written: a crawl directory of the same
# format holds parts without them, which readers take as nulls.
COLUMNS_ADDED: dict[str, tuple[str, ...]] = {
    "media": ("first_seen", "last_changed"),
    "hosts": ("share_marks",),
}

PREFIX_STATS = pa.schema(
    [
        ("host", pa.string()),
        ("share", pa.string()),
        ("prefix", pa.string()),
        ("depth", pa.int32()),
        ("n_files", pa.int64()),
        ("n_folders", pa.int64()),
        ("n_media", pa.int64()),
        ("bytes", pa.int64()),
        ("media_bytes", pa.int64()),
        ("n_new", pa.int64()),
        ("n_changed", pa.int64()),
        ("n_deleted", pa.int64()),
        ("n_errors", pa.int64()),
    ]
)

# One row per folder of a version: Merkle hashes for diffing and finding equal folders.
FOLDERS = pa.schema(
    [
        ("host", pa.string()),
        ("share", pa.string()),
        ("path", pa.string()),
        ("hash", pa.string()),  # Merkle hash with mtimes: folder_hashes(..., with_times=True)
        ("content_hash", pa.string()),  # names and sizes only: equal folders on other hosts
        ("n_files", pa.int64()),  # files in the folder's subtree
        ("bytes", pa.int64()),
    ]
)

FETCHLOG = pa.schema(
    [
        ("round", pa.int32()),
        ("partition_id", pa.string()),
        ("host", pa.string()),
        ("share", pa.string()),
        ("started", TS),
        ("duration_s", pa.float64()),
        ("status", pa.string()),
        ("hash", pa.string()),
        ("n_entries", pa.int64()),
        ("n_tags_read", pa.int64()),
        ("bytes_read", pa.int64()),
        ("error", pa.string()),
        ("listing_s", pa.float64()),
        ("tags_s", pa.float64()),
        ("n_folders", pa.int64()),
        ("host_status", pa.string()),  # a failed scan's hosts.status code: refused, auth_failed...
        ("n_denied", pa.int64()),  # folders whose listing was refused (their rows are kept)
        ("denied", pa.list_(pa.string())),  # those folders' share-relative paths
        ("reason", pa.string()),  # why it was scanned: one of SCAN_REASONS
        # every change since its previous scan was notified (a watched share of a trusted host)
        ("watched", pa.bool_()),
        # "<host name>:<pid>" of the process that fetched it (shards may run on several machines)
        ("worker", pa.string()),
        # entries kept with a time, size or name clamped or marked (crawl_io.checked)
        ("n_clamped", pa.int64()),
    ]
)

# Why a partition is in a round's fetch list (fetchlist.reason, fetchlog.reason): never listed
# or its rows lost; a change notification for a path in it; an overflow hint for its share;
# the scheduling policy; the policy again after its host failed.
SCAN_REASONS = ("new", "hint", "overflow", "scheduled", "retry")

# What Generate hands to Fetch: the partitions to scan this round, with what is stored.
FETCHLIST = pa.schema(
    [
        ("host", pa.string()),
        ("url", pa.string()),
        ("partition_id", pa.string()),
        ("share", pa.string()),
        ("root", pa.string()),
        ("lo", pa.string()),
        ("hi", pa.string()),
        ("hash", pa.string()),
        ("score", pa.float64()),
        ("reason", pa.string()),
        ("watched", pa.bool_()),  # as fetchlog.watched
        # a hinted scan: only these paths' folders are listed (the rest is known unchanged)
        ("hinted_paths", pa.list_(pa.string())),
        ("hints_as_of", TS),  # the hints are known up to here: the hinted scan counts from it
        # the seconds the round budgets for the scan: what fetch shards are balanced by
        ("est_scan_s", pa.float64()),
    ]
)

# What a round changed in the media rows (crawldb/changes/, crawl_io.crawldb.history): one
# row per change, in the crawl's words, kept `history_days` whatever `keep_rounds` removes.
CHANGE_KINDS = ("added", "deleted", "changed", "retagged", "moved")
FIELD_CHANGE = pa.struct([("field", pa.string()), ("before", pa.string()), ("after", pa.string())])
CHANGES = pa.schema(
    [
        ("round", pa.int32()),  # round N published version N
        ("published", TS),  # when version N went live (its MANIFEST.json's time)
        ("host", pa.string()),
        ("share", pa.string()),
        ("path", pa.string()),  # where the media is now (deleted: where it was)
        ("change", pa.string()),  # one of CHANGE_KINDS
        ("kind", pa.string()),  # audio or video, as media.kind
        ("size_before", pa.int64()),  # null: added
        ("size_after", pa.int64()),  # null: deleted
        ("share_before", pa.string()),  # moved: where it was
        ("path_before", pa.string()),
        ("fields", pa.list_(FIELD_CHANGE)),  # retagged: each tag that changed, as text
        ("artist", pa.string()),  # its tags now (deleted: as they were)
        ("title", pa.string()),
        ("album", pa.string()),
    ]
)

# The `versions` view: one row per kept version, from its MANIFEST.json and hosts table.
VERSIONS = pa.schema(
    [
        ("version", pa.string()),  # v000012
        ("round", pa.int32()),
        ("published", TS),
        ("files", pa.int64()),  # files now present (folders left out); null: a part unread
        ("bytes", pa.int64()),  # their sizes' sum
        ("media", pa.int64()),
        ("media_bytes", pa.int64()),
        ("hosts", pa.int64()),
        ("hosts_online", pa.int64()),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "hosts": HOSTS,
    "partitions": PARTITIONS,
    "files": FILES,
    "media": MEDIA,
    "prefix_stats": PREFIX_STATS,
    "fetchlog": FETCHLOG,
    "folders": FOLDERS,  # beyond the contract's six: folder hashes, per host
}
