"""The cluster config file: what a node, a client and the tools read from it."""

from relay.config.cluster import ClusterConfig, ConfigError, NodeSpec, load, parse

__all__ = ["ClusterConfig", "ConfigError", "NodeSpec", "load", "parse"]
