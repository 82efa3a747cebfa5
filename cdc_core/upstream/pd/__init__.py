"""PD, as the embedded cluster runs it: the TSO (``tso``), the region map (``regions``), the member group
(``pd_members``), the ``pdpb.PD`` service (``pd_service``) and PD's HTTP API on the same port (``pd_http``), the etcd
key space PD embeds (``etcd_service``), service GC safe points (``gc_safe_points``) and the cluster's min resolved ts
(``min_resolved_ts``). Imports nothing of the stores or the SQL front."""
