"""Glue for web frameworks: one driver and long-lived writers per process, supervised consumers."""
