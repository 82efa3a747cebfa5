"""Continuous capture: one long-lived subscription per changefeed writing the bronze changelog in parts."""
