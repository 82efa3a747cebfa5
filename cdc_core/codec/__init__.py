"""Byte-level codecs shared by the upstream, the puller and the Spark jobs: TSO, keys, row values."""
