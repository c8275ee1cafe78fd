"""Accounts for `mascot web --accounts`: people sign up and log in, and each person's
conversations, their turns, safety events and ratings live in one database (SQLite in the session
folder by default, PostgreSQL by URL), reached only through the owner-filtered repository
(`repository.PersonData`), so another person's id is answered exactly as an unknown one.

Modules: `tables` (the schema), `database` (engine, migrations at start), `passwords` (Argon2),
`repository` (every query), `limits` (rate limits in the shared database), `store` (the chat
sessions of one person), `auth` (login cookies) and `routes` (the pages).
"""
