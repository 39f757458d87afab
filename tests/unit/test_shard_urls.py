"""The cube shard URL contract (ELASTICCTR_CUBE_SHARDS): shards comma-separated, shard 0
first, the replicas of a shard joined by `|` (docs/cube.md "Replicas")."""

from __future__ import annotations

import pytest

from elasticctr.constants import CUBE_REPLICA_SEPARATOR
from elasticctr.cube.protocol import format_shards, parse_shards
from elasticctr.errors import EctlError

pytestmark = pytest.mark.fast


def test_one_url_per_shard_is_one_replica_each():
    assert parse_shards("http://a:1, http://b:1,") == [["http://a:1"], ["http://b:1"]]


def test_replicas_of_a_shard_are_joined_by_the_separator():
    spec = "http://c-0:8500|http://c-2:8500,http://c-1:8500|http://c-3:8500"
    shards = parse_shards(spec)
    assert shards == [
        ["http://c-0:8500", "http://c-2:8500"],
        ["http://c-1:8500", "http://c-3:8500"],
    ]
    assert ",".join(format_shards(shards)) == spec
    assert CUBE_REPLICA_SEPARATOR == "|"


def test_a_list_is_one_shard_per_item_as_repeated_options_give():
    assert parse_shards(["http://a|http://b", "http://c"]) == [
        ["http://a", "http://b"],
        ["http://c"],
    ]


def test_an_empty_replica_is_refused():
    with pytest.raises(EctlError, match="empty replica"):
        parse_shards("http://a||http://b")
