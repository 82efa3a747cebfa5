"""Changefeeds: configuration, persisted state, window planning and the tasks that run a window."""
