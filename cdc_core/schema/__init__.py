"""Table schemas: the table-info model, the DDL history system table, and schema storage."""
