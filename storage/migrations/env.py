"""Alembic environment: always driven with a connection from the async engine."""

from __future__ import annotations

from alembic import context

from storage._schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `pai-grpc migrate` (storage._migrate)")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
