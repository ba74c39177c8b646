"""Flagging answers for review with a calibrator, optionally with a guarantee on the kept answers' error."""
