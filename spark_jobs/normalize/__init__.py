"""Normalize: a window's bronze events turned into the net change of each table, what the load writes.

- ``bronze``: the bronze changelog as the Spark jobs see it (layout, schema, writer, readers);
- ``window_events``: a window's events of several tables, read on the driver in one pass;
- ``mount``: the row events decoded with their TableInfo, in Spark's Python workers;
- ``mapped_values``: the values Delta cannot hold, marked where they are read and counted;
- ``event_filters``: a table's event filters, evaluated on the mounted events;
- ``net_effect``: dedupe, update split, order and net effect in Spark;
- ``net_effect_arrow``: the same in Arrow on the driver, for the delta-rs writer;
- ``changed_keys``: the Delta keys a window changed, for every table it touched.
"""
