"""Wire-level test clients: the upstream's services as a TiDB-side client sees them, with plain kvproto
messages, independent of cdcflow's own clients (``pd``: ``pdpb.PD``)."""
