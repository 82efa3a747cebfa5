"""TiDB's SQL front: sessions executing scripts (``sql_front``) and the MySQL protocol over them (``mysql_front``;
``mysql_errors``: MySQL's error codes of ``errors``' SQL errors), expressions (``expr``), access paths
(``access_path``), ``information_schema`` and its streamed listings (``info_schema``, ``table_listing``), sql_mode
(``sql_mode``), transactions over the store (``txn``), table writing (``table_writer``) and ``IMPORT INTO``
(``bulk_import``). DDL is ``sql.ddl``: the sessions run it, it writes through the transactions and tables here."""
