"""The cluster config file: what a node, a client and the tools read from it."""

from relay.config.cluster import ClusterConfig, ConfigError, load, parse
from relay.config.nodes import NodeSpec

__all__ = ["ClusterConfig", "ConfigError", "NodeSpec", "load", "parse"]
