"""cdcflow engine: change-data-capture from a TiKV-like region cluster into Delta Lake."""
