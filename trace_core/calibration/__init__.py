"""Calibrators (TRACE+, Platt, isotonic), reading them from JSON, and the drift check."""
