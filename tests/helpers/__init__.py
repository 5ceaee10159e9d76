"""Helpers shared by the test modules: sample jobs and templates, serialization settings."""
