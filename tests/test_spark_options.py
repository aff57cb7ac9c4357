"""The relay Spark source's options: checked on the driver, with errors that say what to do."""

from pathlib import Path

import pytest

from relay.core.flake import make_seq
from relay.runtime.local_cluster import write_config
from spark_consumer.options import FETCH_ROWS_MAX, parse_options

NODES = "127.0.0.1:7101, 127.0.0.1:7102"


def test_defaults_follow_the_kafka_source() -> None:
    batch = parse_options({"stream": "orders", "nodes": NODES}, default_start="earliest")
    assert batch.starting == "earliest" and batch.ending == 0
    assert batch.fail_on_data_loss and not batch.flag_mismatches
    assert batch.max_per_trigger == 0 and batch.min_partitions == 1
    assert batch.fetch_rows == FETCH_ROWS_MAX
    assert [a.port for a in batch.nodes] == [7101, 7102]
    assert parse_options({"stream": "o", "nodes": NODES}, default_start="latest").starting == (
        "latest"
    )


def test_names_are_case_insensitive_and_seqs_are_inclusive() -> None:
    o = parse_options(
        {
            "STREAM": "orders",
            "nodes": NODES,
            "startingoffsets": "1000",
            "ENDINGOFFSETS": "2000",
            "maxOffsetsPerTrigger": "50",
            "failondataloss": "false",
            "Verification": "flag",
        },
        default_start="latest",
    )
    assert (o.starting, o.ending, o.max_per_trigger) == (999, 2000, 50)
    assert not o.fail_on_data_loss and o.flag_mismatches


def test_a_starting_timestamp_becomes_the_seq_just_before_it() -> None:
    o = parse_options(
        {"stream": "s", "nodes": NODES, "startingTimestamp": "1800000000000"}, "earliest"
    )
    assert o.starting == make_seq(1_800_000_000_000, 0, 0) - 1


def test_a_config_file_gives_every_node(tmp_path: Path) -> None:
    config = write_config(tmp_path, 3)
    o = parse_options({"stream": "s", "config": str(config)}, "earliest")
    assert [a.node_id for a in o.nodes] == [1, 2, 3]
    assert [a.node_id for a in o.nodes_from(4)] == [2, 3, 1]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"nodes": NODES}, "exactly one of option 'stream', 'subscribe'"),
        ({"stream": "s", "subscribe": "t", "nodes": NODES}, "exactly one of option 'stream'"),
        ({"subscribe": "a,b*", "nodes": NODES}, "option 'subscribe': 'b\\*'"),
        ({"stream": "a*", "nodes": NODES}, "option 'stream'"),
        ({"stream": "s"}, "exactly one of option 'config' or option 'nodes'"),
        ({"stream": "s", "nodes": NODES, "config": "c.toml"}, "exactly one of"),
        ({"stream": "s", "nodes": "localhost"}, "is not host:port"),
        ({"stream": "s", "config": "/no/such/cluster.toml"}, "option config"),
        ({"stream": "s", "nodes": NODES, "startingOffsets": "first"}, "earliest, latest, a seq"),
        ({"stream": "s", "nodes": NODES, "endingOffsets": "earliest"}, "latest, the last seq"),
        ({"subscribe": "a,b", "nodes": NODES, "startingOffsets": "5"}, "with one stream"),
        ({"subscribe": "a", "nodes": NODES, "startingOffsets": '{"a": 0}'}, "'a' has 0"),
        ({"subscribe": "a", "nodes": NODES, "startingOffsets": '{"b": 5}'}, "not subscribed"),
        ({"subscribe": "a", "nodes": NODES, "endingOffsets": '{"a": -2}'}, "cannot end"),
        ({"stream": "s", "nodes": NODES, "maxTriggerDelay": "soon"}, "30s, 15m"),
        ({"stream": "s", "nodes": NODES, "maxOffsetsPerTrigger": "0"}, "at least 1"),
        ({"stream": "s", "nodes": NODES, "fetchRows": "9000"}, "from 1 to 5000"),
        ({"stream": "s", "nodes": NODES, "failOnDataLoss": "maybe"}, "true or false"),
        ({"stream": "s", "nodes": NODES, "verification": "warn"}, "fail, flag"),
        ({"stream": "s", "nodes": NODES, "startingOffset": "earliest"}, "unknown option"),
    ],
)
def test_bad_options_are_refused_with_what_to_use(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_options(options, "earliest")


def test_streams_by_list_or_pattern_with_offsets_per_stream() -> None:
    o = parse_options(
        {
            "subscribe": "orders.eu, orders.us",
            "nodes": NODES,
            "startingOffsets": '{"orders.eu": 123, "orders.us": -2}',
            "endingOffsets": '{"orders.eu": 456, "orders.us": -1}',
        },
        "latest",
    )
    assert o.streams == ("orders.eu", "orders.us") and not o.pattern
    assert (o.start_of("orders.eu"), o.start_of("orders.us")) == (122, "earliest")
    assert (o.end_of("orders.eu"), o.end_of("orders.us")) == (456, 0)
    p = parse_options({"subscribePattern": "orders.*", "nodes": NODES}, "latest")
    assert p.subscribes("orders.eu") and not p.subscribes("payments.eu")
    assert not p.subscribes("orders.eu.__group.billing")  # internal streams: only if named
    assert parse_options({"subscribePattern": "*.__group.*", "nodes": NODES}, "latest").subscribes(
        "orders.__group.billing"
    )


def test_ending_timestamp_and_trigger_bounds() -> None:
    o = parse_options(
        {
            "stream": "s",
            "nodes": NODES,
            "endingTimestamp": "1800000000000",
            "minOffsetsPerTrigger": "100",
            "maxTriggerDelay": "30s",
        },
        "earliest",
    )
    assert o.ending == make_seq(1_800_000_000_000, 0, 0) - 1  # every tx before that ms
    assert (o.min_per_trigger, o.max_trigger_delay_s) == (100, 30.0)
    default = parse_options({"stream": "s", "nodes": NODES}, "earliest")
    assert default.max_trigger_delay_s == 15 * 60  # Kafka's 15m
