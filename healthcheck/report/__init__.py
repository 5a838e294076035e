"""Reports: the versioned JSON document, atomic writes, tables for humans."""
