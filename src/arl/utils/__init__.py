"""Helpers: config validation, instantiation, logging."""
