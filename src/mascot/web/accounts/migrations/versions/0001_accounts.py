"""accounts, conversations, turns, safety events, ratings, rosters, rate events

Revision ID: 0001
Revises: (none)
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_people()
    create_conversations()
    create_invitations_and_logins()
    create_counted_events_and_rosters()
    create_conversation_children()


def create_people() -> None:
    op.create_table(
        "people",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("password_hash", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.Column("training_consent", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_people")),
        sa.UniqueConstraint("username", name=op.f("uq_people_username")),
    )


def create_conversations() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.String(length=100), nullable=False),
        sa.Column("owner_id", sa.String(length=40), nullable=False),
        sa.Column("roster", sa.String(length=200), nullable=False),
        sa.Column("situation", sa.Text(), nullable=False),
        sa.Column("opening", sa.Text(), nullable=False),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("record", sa.Text(), nullable=False),
        sa.Column("reply_worker", sa.String(length=64), nullable=True),
        sa.Column("reply_heartbeat", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["owner_id"], ["people.id"], name=op.f("fk_conversations_owner_id"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
    )
    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_conversations_owner_id"), ["owner_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_conversations_updated_at"), ["updated_at"], unique=False)


def create_invitations_and_logins() -> None:
    op.create_table(
        "invitations",
        sa.Column("code_hash", sa.String(length=64), nullable=False),
        sa.Column("created_by", sa.String(length=40), nullable=True),
        sa.Column("used_by", sa.String(length=40), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["created_by"], ["people.id"], name=op.f("fk_invitations_created_by"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["used_by"], ["people.id"], name=op.f("fk_invitations_used_by"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("code_hash", name=op.f("pk_invitations")),
    )
    op.create_table(
        "login_sessions",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("person_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["person_id"], ["people.id"], name=op.f("fk_login_sessions_person_id"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_login_sessions")),
    )
    with op.batch_alter_table("login_sessions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_login_sessions_person_id"), ["person_id"], unique=False)


def create_counted_events_and_rosters() -> None:
    op.create_table(
        "rate_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("key", sa.String(length=120), nullable=False),
        sa.Column("person_id", sa.String(length=40), nullable=True),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["person_id"], ["people.id"], name=op.f("fk_rate_events_person_id"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rate_events")),
    )
    with op.batch_alter_table("rate_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_rate_events_at"), ["at"], unique=False)
        batch_op.create_index(batch_op.f("ix_rate_events_key"), ["key"], unique=False)

    op.create_table(
        "rosters",
        sa.Column("owner_id", sa.String(length=40), nullable=False),
        sa.Column("key", sa.String(length=40), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["owner_id"], ["people.id"], name=op.f("fk_rosters_owner_id"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("owner_id", "key", name=op.f("pk_rosters")),
    )


def create_conversation_children() -> None:
    op.create_table(
        "ratings",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("record", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"], name=op.f("fk_ratings_conversation_id"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ratings")),
    )
    with op.batch_alter_table("ratings", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ratings_conversation_id"), ["conversation_id"], unique=False)

    op.create_table(
        "safety_events",
        sa.Column("conversation_id", sa.String(length=100), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("record", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"], name=op.f("fk_safety_events_conversation_id"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("conversation_id", "position", name=op.f("pk_safety_events")),
    )
    op.create_table(
        "turns",
        sa.Column("conversation_id", sa.String(length=100), nullable=False),
        sa.Column("turn_idx", sa.Integer(), nullable=False),
        sa.Column("record", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"], name=op.f("fk_turns_conversation_id"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("conversation_id", "turn_idx", name=op.f("pk_turns")),
    )


def downgrade() -> None:
    op.drop_table("turns")
    op.drop_table("safety_events")
    with op.batch_alter_table("ratings", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ratings_conversation_id"))

    op.drop_table("ratings")
    op.drop_table("rosters")
    with op.batch_alter_table("rate_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_rate_events_key"))
        batch_op.drop_index(batch_op.f("ix_rate_events_at"))

    op.drop_table("rate_events")
    with op.batch_alter_table("login_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_login_sessions_person_id"))

    op.drop_table("login_sessions")
    op.drop_table("invitations")
    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_conversations_updated_at"))
        batch_op.drop_index(batch_op.f("ix_conversations_owner_id"))

    op.drop_table("conversations")
    op.drop_table("people")
