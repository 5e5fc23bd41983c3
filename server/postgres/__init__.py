"""The PostgreSQL backend behind the storage seam (`server.indexes.storage`), chosen by `MEMORY_DATABASE_URL`."""
