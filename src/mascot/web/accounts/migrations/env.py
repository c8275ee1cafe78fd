"""Alembic's environment for the accounts database: run by `database.migrate` on the connection it
passes (no alembic.ini; the URL is the app's)."""

from alembic import context

from mascot.web.accounts.tables import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
