"""A node's HTTP API and console (``http_port`` in its ``[[node]]``): streams, messages,
consumer groups and work groups over HTTP for any language, and a page to watch the cluster.
See ``server`` for how it runs and README.md "HTTP" for the API."""
