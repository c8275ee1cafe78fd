"""CSRF tokens for the study's forms: an HMAC of the form's scope (the rater's link token) under the
study's secret. A page embeds the token in a hidden field; a POST without the matching token is
refused. Another site can make a rater's browser post, but cannot read the page to learn the token.

Interface (kept small so that one helper can serve the whole web app): `csrf_token(secret, scope)`
and `csrf_ok(secret, scope, submitted)`.
"""

from __future__ import annotations

import hashlib
import hmac

CSRF_FIELD = "csrf_token"


def csrf_token(secret: str, scope: str) -> str:
    return hmac.new(secret.encode(), f"csrf:{scope}".encode(), hashlib.sha256).hexdigest()


def csrf_ok(secret: str, scope: str, submitted: str | None) -> bool:
    return bool(submitted) and hmac.compare_digest(csrf_token(secret, scope), str(submitted))
