"""Benchmarks (`make bench`)."""
