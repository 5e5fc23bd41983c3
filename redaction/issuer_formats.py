"""More issuers' prefixed tokens, the shapes public secret scanners (gitleaks, detect-secrets) know them by.

Like `formats.py`, these need no context: the prefix names the issuer and the body is generated. Each body must
mix two character classes (or be hex of a fixed length) so that a word after a familiar prefix stays. All are one
kind, `api-token`: the issuer is plain from the prefix left in the text around the marker's place.
"""

from __future__ import annotations

import re

from redaction.entropy import char_classes
from redaction.rule import Rule, after_edge, when

_EDGE = "A-Za-z0-9_-"


def _generated(body: str) -> bool:
    return char_classes(body) >= 2 or (len(body) >= 32 and all(c in "0123456789abcdef" for c in body.lower()))


def _token(prefix: str, body: str, *, edge: str = _EDGE) -> Rule:
    pattern = after_edge(prefix, edge) + body + rf"(?![{edge}])"
    return Rule("api-token", re.compile(pattern), when(lambda token: _generated(token[len(prefix) :])))


ISSUER_RULES: tuple[Rule, ...] = (
    _token("shp", r"(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),  # Shopify
    _token("do", r"[opr]_v1_[a-f0-9]{64}"),  # DigitalOcean
    _token("dapi", r"[a-f0-9]{32}(?:-[0-9])?"),  # Databricks
    _token("dp.", r"(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}"),  # Doppler
    _token("lin_api_", r"[A-Za-z0-9]{40}"),  # Linear
    _token("PMAK-", r"[a-f0-9]{24}-[a-f0-9]{34}"),  # Postman
    _token("AGE-SECRET-KEY-1", r"[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),  # age
    # Grafana: cloud and service-account tokens
    _token("gl", r"(?:c_[A-Za-z0-9+/]{32,400}={0,2}|sa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8})", edge="A-Za-z0-9_+/="),
    _token("sq0", r"(?:atp-[0-9A-Za-z_-]{22}|csp-[0-9A-Za-z_-]{43})"),  # Square
    _token("NRAK-", r"[A-Z0-9]{27}"),  # New Relic
    _token("pscale_", r"(?:tkn|pw|oauth)_[A-Za-z0-9=._-]{32,64}"),  # PlanetScale
    _token("pul-", r"[a-f0-9]{40}"),  # Pulumi
    _token("sbp_", r"[a-f0-9]{40}"),  # Supabase
    _token("hvs.", r"[A-Za-z0-9_-]{90,120}", edge="A-Za-z0-9_.-"),  # HashiCorp Vault
    _token("GOCSPX-", r"[A-Za-z0-9_-]{28}"),  # Google OAuth client secret
    _token("ATATT3", r"[A-Za-z0-9_=-]{180,200}"),  # Atlassian API token
    _token("HRKU-", r"[A-Za-z0-9_-]{58,64}"),  # Heroku
    _token("fo1_", r"[A-Za-z0-9_-]{43}"),  # Fly.io
    _token("dckr_pat_", r"[A-Za-z0-9_-]{27,32}"),  # Docker Hub
)
