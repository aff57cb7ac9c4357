"""Typed streams: a stream's JSON Schema, what it admits, and how it may change."""
